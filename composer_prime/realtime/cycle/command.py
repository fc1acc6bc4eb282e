"""`composer-prime realtime`: the real-time RL cycle over a spool of live session logs (docs/realtime.md)."""

from __future__ import annotations

import sys


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config
    from composer_prime.realtime.cycle.config import RealtimeConfig

    config = parse_config(RealtimeConfig, argv, prog, description=__doc__.splitlines()[0])
    if config.demo is None and config.prime_rl is None and not config.spool.dir.is_dir():
        print(
            f"realtime: spool.dir = {str(config.spool.dir)!r} does not exist; point --spool.dir at the folder the "
            "serving product writes session logs to",
            file=sys.stderr,
        )
        return 2
    if config.model_dir is not None and not (config.model_dir / "config.json").exists():
        print(
            f"realtime: model_dir = {str(config.model_dir)!r} is not an HF model dir (no config.json)", file=sys.stderr
        )
        return 2
    from composer_prime.realtime.cycle.cluster import PrimeRLExited
    from composer_prime.realtime.cycle.cpu import SetupError
    from composer_prime.realtime.cycle.runner import EvalError, LockedError, Runner, ShipError
    from composer_prime.realtime.durable import DurableError
    from composer_prime.realtime.ingest.spool import SpoolError

    try:
        state = Runner(config, log=lambda line: print(line, flush=True)).run()
    except (LockedError, SpoolError, EvalError, ShipError, PrimeRLExited, DurableError, SetupError) as err:
        print(f"realtime: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a write outside the durable files (a full disk, a read-only folder)
        print(
            f"realtime: {err}; free space or fix the permissions and rerun: the run resumes from its last "
            "committed state",
            file=sys.stderr,
        )
        return 1
    except ValueError as err:  # a bad hook path or staleness setting found at run time
        print(f"realtime: {err}", file=sys.stderr)
        return 2
    from composer_prime.realtime import durable

    durable.save(config.state_dir / "report.json", state, indent=1)
    shipped = sum(1 for r in state.history if r["shipped"])
    print(
        f"{state.cycle} cycles, {shipped} shipped, serving v{state.version}; report: {config.state_dir / 'report.json'}"
    )
    return 0
