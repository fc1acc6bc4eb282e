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
    parser.add_argument("--steps", type=int, default=3, help="RL steps (default 3)")
    parser.add_argument("--out", type=Path, default=Path("smoke-out"), help="report and work dir (default smoke-out)")
    parser.add_argument("--tasks", type=int, default=2, help="Feature Deletion tasks per step, 1-4 (default 2)")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task, G (default 4)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--port", type=int, default=0, help="policy server port on 127.0.0.1 (default 0: a free one)")
    parser.add_argument("--teacher-url", default=None, help="a real OpenAI-compatible teacher API root instead of "
                        "the local rule-based stand-ins (with --teacher-model)")  # fmt: skip
    parser.add_argument("--teacher-model", default=None, help="model name at --teacher-url")
    parser.add_argument("--teacher-api-key-var", default=None, help="env var holding the --teacher-url API key")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model, warm start and sampling (default 0)")
    parser.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live display")


def missing_modules() -> list[str]:
    return [what for module, what in REQUIRED.items() if importlib.util.find_spec(module) is None]


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from composer_prime.smoke.config import SmokeConfig
    from composer_prime.smoke.services import port_free

    try:
        config = SmokeConfig(
            steps=args.steps, out=args.out, tasks=args.tasks, group_size=args.group_size, temperature=args.temperature,
            port=args.port, teacher_url=args.teacher_url, teacher_model=args.teacher_model,
            teacher_api_key_var=args.teacher_api_key_var, seed=args.seed,
        )  # fmt: skip
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
