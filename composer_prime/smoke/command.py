"""`composer-prime smoke --prime-rl PATH`: PRIME-RL's own `rl` over `tomls/cpu-smoke.toml` on this CPU machine.

In order (docs/smoke.md): refuse a second smoke into the same `--out` (a lock), remove a stale report; build the
two venvs once (`local/venvs.py`); patch a private copy of PATH for CPU (`local/tree.py`); mine the bundled
repository's tasks and warm-start the tiny policy (`prepare.py`, in the PRIME-RL venv); start the rule-based
teachers (`referees.py`); run PRIME-RL's launcher, `rl @ tomls/cpu-smoke.toml [@ recipes/<name>.toml ...]`, which
starts the inference server, the env server, the orchestrator and the torchrun trainer; probe the served model after
every weight reload (`probe.py`); then build the report and plot from PRIME-RL's metrics, rollouts, broadcasts and
logs (`report.py`). Every child runs in a session of its own and Ctrl-C stops them all (`process/group.py`).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

PROJECT_INSTALL = "pip install -e ."


def split_overlays(argv: list[str]) -> tuple[list[str], list[Path]]:
    """Flags for the smoke's config, and the `@ FILE.toml` launch overlays for PRIME-RL's `rl`, in order."""
    from composer_prime.cli import UsageError

    flags: list[str] = []
    overlays: list[Path] = []
    args = iter(argv)
    for arg in args:
        if arg == "@" or (arg.startswith("@") and arg.endswith(".toml")):
            path = Path(next(args, "") if arg == "@" else arg[1:])
            if not path.is_file() or str(path).startswith("-"):
                raise UsageError(
                    f"composer-prime smoke: @ {str(path)!r}: no such file; `@` takes a launch overlay "
                    "such as recipes/no-hint.toml"
                )
            refuse_source_overlay(path)
            overlays.append(path.resolve())
        else:
            flags.append(arg)
    return flags, overlays


def refuse_source_overlay(path: Path) -> None:
    """An overlay that restates `[[orchestrator.train.source]]` replaces the launch config's sources whole (PRIME-RL's
    merge replaces arrays of tables): over the CPU config it would train on the cluster's data paths and images."""
    import tomllib

    from composer_prime.cli import UsageError

    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"composer-prime smoke: @ {str(path)!r}: not a readable TOML file ({err})") from None
    if "source" in ((data.get("orchestrator") or {}).get("train") or {}):
        raise UsageError(
            f"composer-prime smoke: @ {str(path)!r} restates [[orchestrator.train.source]]; PRIME-RL's "
            "merge replaces the whole list, so over tomls/cpu-smoke.toml it would train on the cluster's "
            "sources (data paths, docker images). Write an overlay that restates the smoke's source "
            "(tomls/cpu-smoke.toml) instead"
        )


def interrupted(signum: int, frame: object) -> None:
    """`kill PID` stops the smoke as Ctrl-C does, every process it started with it (left to the kernel's death
    signal, PRIME-RL's launcher would stop its processes itself, taking minutes, with training going on)."""
    raise KeyboardInterrupt


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import UsageError, parse_config
    from composer_prime.local.tree import FETCH, TreeError, check_tree
    from composer_prime.smoke.config import SmokeConfig

    flags, overlays = split_overlays(argv)
    config = parse_config(SmokeConfig, flags, prog, description=__doc__.splitlines()[0])
    if config.prime_rl is None:
        raise UsageError(
            f"{prog}: --prime-rl PATH is required: a PRIME-RL checkout at 559b447. Get one with:\n  {FETCH}\n"
            f"then run: {prog} --prime-rl ../prime-rl"
        )
    from composer_prime.local.launch import project_root

    project = project_root()
    if project is None:
        raise UsageError(
            f"{prog}: the smoke installs composer-prime from its checkout into the venvs it builds; run "
            "it from a clone of composer-prime installed with `pip install -e .`"
        )
    try:
        check_tree(config.prime_rl.resolve())
    except TreeError as err:
        raise UsageError(f"{prog}: {err}") from None
    from composer_prime.process.group import ProcessFailed
    from composer_prime.smoke.outdir import NotResumable
    from composer_prime.smoke.run import Busy, execute

    signal.signal(signal.SIGTERM, interrupted)
    try:
        return execute(config, overlays, project)
    except (Busy, NotResumable) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    except TreeError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    except ProcessFailed as err:
        print(f"{prog}: the run stopped: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(
            f"{prog}: the run stopped: {err.strerror or err} ({err.filename or 'no file'}); check that --out and "
            "--cache are writable and the disk has room",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"{prog}: interrupted; every process it started is stopped. Logs so far: {config.out / 'logs'}",
            file=sys.stderr,
        )
        return 130
