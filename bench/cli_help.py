"""How long `composer-prime COMMAND --help` takes, and what it imports on the way.

`--help` only parses: each subcommand module imports its config (pydantic and `pydantic_config`) and nothing of
what the command runs (the grader, verifiers, torch). This script runs `python -X importtime -m composer_prime.cli
COMMAND --help` in fresh interpreters and prints, per command, the median wall time and the modules that cost the most
(cumulative import time, top level only), so a slow `--help` shows its culprit. Target: under 2 s (0.3 s measured
for mine-features on the 2-core development machine, 2026-11-26).

    .venv/bin/python bench/cli_help.py [--repeats 5] [--top 8] [COMMAND ...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from composer_prime.cli import SUBCOMMANDS

TARGET_S = 2.0


def measure(command: str) -> tuple[float, list[tuple[int, str]]]:
    """(wall seconds, [(cumulative microseconds, module)] of top-level imports) of one `--help` run."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "composer_prime.cli", command, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`composer-prime {command} --help` exited {done.returncode}:\n{done.stderr[-2000:]}")
    imports = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if not name.startswith("  "):  # one space, then two more per nesting level
            imports.append((int(cumulative), name.strip()))
    return seconds, imports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="*", default=list(SUBCOMMANDS), help="subcommands to time (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per command (median reported)")
    parser.add_argument("--top", type=int, default=8, help="top-level imports listed per command")
    args = parser.parse_args()
    unknown = [c for c in args.commands if c not in SUBCOMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {unknown}; choose from {sorted(SUBCOMMANDS)}")
    slow = 0
    print(f"| command | median --help (s), {args.repeats} runs | costliest top-level imports (ms) |")
    print("|---|---|---|")
    for command in args.commands:
        runs = [measure(command) for _ in range(args.repeats)]
        median = statistics.median(seconds for seconds, _ in runs)
        top = sorted(runs[-1][1], reverse=True)[: args.top]
        shown = ", ".join(f"{name} {micro / 1000:.0f}" for micro, name in top)
        print(f"| {command} | {median:.2f} | {shown} |")
        slow += median > TARGET_S
    print(f"\n{slow} command(s) over the {TARGET_S:g} s target")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
