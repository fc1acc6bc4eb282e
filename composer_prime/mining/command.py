"""`composer-prime mine-features`: mine Feature Deletion tasks from a tested repository."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", type=Path, required=True, help="root of the repository to mine (only read)")
    parser.add_argument("--out", type=Path, required=True, help="tasks file to write (JSON lines); resumed if present")
    parser.add_argument("--max-tasks", type=int, default=None, help="stop once the file holds this many tasks")
    parser.add_argument(
        "--min-tests", type=int, default=1, help="least FAIL_TO_PASS tests a task must have (default: 1)"
    )
    parser.add_argument(
        "--min-body-lines",
        type=int,
        default=3,
        help="leave out functions and methods with a shorter body, docstring aside (default: 3)",
    )
    parser.add_argument(
        "--test-cmd",
        default="python -m pytest",
        help="'<python> -m pytest', shell-quoted (default: 'python -m pytest'): the interpreter with the project's "
        "test dependencies; mining runs pytest through the grader's launcher",
    )
    parser.add_argument(
        "--test-timeout",
        type=float,
        default=None,
        help="seconds one run of the suite may take per candidate (default: 4x the untraced baseline, at least 60)",
    )
    parser.add_argument(
        "--baseline-timeout", type=float, default=1800.0, help="seconds the first baseline run may take (default: 1800)"
    )


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from composer_prime.mining.miner import MineConfig, Miner, MiningError

    try:
        config = MineConfig(
            repo=args.repo,
            out=args.out,
            max_tasks=args.max_tasks,
            min_tests=args.min_tests,
            min_body_lines=args.min_body_lines,
            test_cmd=shlex.split(args.test_cmd),
            test_timeout_s=args.test_timeout,
            baseline_timeout_s=args.baseline_timeout,
        )
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            print(
                f"mine-features: --{field.replace('_', '-')} = {error.get('input')!r}: {error['msg']}", file=sys.stderr
            )
        return 2
    try:
        tasks = Miner(config).run()
    except MiningError as exc:
        print(f"mine-features: {exc}", file=sys.stderr)
        return 1
    return 0 if tasks else 1
