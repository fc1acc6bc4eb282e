"""`composer-prime smoke`: flags, checks of what the run needs, then the run and its report (docs/smoke.md)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

INSTALL = "pip install torch==2.13.0 -e '.[smoke]' -e environments/feature_deletion"
"""What installs every module the run needs (from a composer-prime checkout)."""

REQUIRED = {
    "torch": "torch",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "verifiers": "verifiers",
    "renderers": "renderers",
    "aiohttp": "aiohttp",
    "matplotlib": "matplotlib",
    "pytest": "pytest",
    "feature_deletion": "the feature-deletion environment (environments/feature_deletion)",
    "composer_agent": "composer-agent (composer_agent)",
}

FLAGS = {"group_size": "group-size", "teacher_url": "teacher-url", "teacher_model": "teacher-model",
         "teacher_api_key_var": "teacher-api-key-var", "summarize_at_tokens": "summarize-at-tokens",
         "max_tokens": "max-tokens", "max_turns": "max-turns"}  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    # Defaults live in SmokeConfig only: a flag not given is not passed on.
    parser.set_defaults(no_live=False)
    flag = parser.add_argument
    flag("--steps", type=int, default=argparse.SUPPRESS, help="RL steps (default 3)")
    flag("--out", type=Path, default=argparse.SUPPRESS, help="report and work dir (default smoke-out)")
    flag("--tasks", type=int, default=argparse.SUPPRESS, help="Feature Deletion tasks per step, 1-4 (default 2)")
    flag("--group-size", type=int, default=argparse.SUPPRESS, help="rollouts per task, G (default 4)")
    flag("--temperature", type=float, default=argparse.SUPPRESS, help="sampling temperature (default 1.0)")
    flag("--port", type=int, default=argparse.SUPPRESS, help="policy server port on 127.0.0.1 (default 0: a free one)")
    flag("--teacher-url", default=argparse.SUPPRESS, help="a real OpenAI-compatible teacher API root instead of the "
         "local rule-based stand-ins (with --teacher-model)")  # fmt: skip
    flag("--teacher-model", default=argparse.SUPPRESS, help="model name at --teacher-url")
    flag("--teacher-api-key-var", default=argparse.SUPPRESS, help="env var holding the --teacher-url API key")
    flag("--seed", type=int, default=argparse.SUPPRESS, help="seed of the model, warm start and sampling (default 0)")
    flag("--no-live", action="store_true", help="plain progress lines instead of the live display")


def missing_modules() -> list[str]:
    return [what for module, what in REQUIRED.items() if importlib.util.find_spec(module) is None]


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from composer_prime.smoke.config import SmokeConfig
    from composer_prime.smoke.services import port_free

    try:
        config = SmokeConfig(**{k: v for k, v in vars(args).items() if k in SmokeConfig.model_fields})
    except ValidationError as err:
        for error in err.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            flag = f"--{FLAGS.get(field, field.replace('_', '-'))} = {error.get('input')!r}: " if field else ""
            print(f"smoke: {flag}{error['msg']}", file=sys.stderr)
        return 2
    missing = missing_modules()
    if missing:
        print(f"smoke: missing {', '.join(missing)}. Install them from the composer-prime checkout with: {INSTALL}",
              file=sys.stderr)  # fmt: skip
        return 2
    if config.port and not port_free(config.port):
        print(f"smoke: --port = {config.port}: the port is in use on 127.0.0.1; pick another port or leave --port at 0 "
              "(a free port)", file=sys.stderr)  # fmt: skip
        return 2
    from composer_prime.smoke.orchestrator import fresh_work_dir

    try:
        config.out.mkdir(parents=True, exist_ok=True)
        fresh_work_dir(config.out / "work")
    except FileExistsError as err:
        print(f"smoke: --out = {str(config.out)!r}: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"smoke: --out = {str(config.out)!r}: cannot create it ({err.strerror}); name a writable directory",
              file=sys.stderr)  # fmt: skip
        return 2
    return execute(config, live=not args.no_live)


def execute(config, live: bool = True) -> int:
    import asyncio
    import logging

    from rich.console import Console

    from composer_prime.smoke import report as reporting
    from composer_prime.smoke.orchestrator import run as run_smoke
    from composer_prime.smoke.services import ServiceError

    logging.basicConfig(level=logging.ERROR, filename=str(config.out / "smoke.log"))
    try:
        with reporting.Reporter(live=live) as reporter:
            result = asyncio.run(run_smoke(config, reporter))
    except (ServiceError, RuntimeError, OSError) as err:
        print(f"smoke: the run stopped: {err}\nLogs and traces so far are in {config.out / 'work'}.", file=sys.stderr)
        return 1
    reporting.write_json(result, config.out / "report.json")
    reporting.plot(result, config.out / "report.png")
    console = Console()
    if not console.is_terminal:
        console.width = 132  # a log file or pipe: wide enough for every column
    for grid in reporting.tables(result):
        console.print(grid)
    console.print(f"total {result['seconds']:.0f}s; report: {config.out / 'report.json'}, plot: {config.out / 'report.png'}")
    return 0
