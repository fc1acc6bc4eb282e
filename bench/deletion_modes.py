"""Feature Deletion yield by deletion mode: the same packages mined with `--deletion whole`, `stub` and `auto`.

For each `--sdist NAME==VERSION` (fetched from PyPI with `pip download --no-binary :all:`, as bench/feature_deletion.py
does; nothing is kept) and each `--repo PATH`, the miner runs once per mode over the same tree, on the host, with the
miner's defaults but `--deletion` (and `--max-tasks`, default none: every candidate). The table gives, per package and
mode: candidates tried, tasks kept (and how many of them are stubs), the mean FAIL_TO_PASS per task, the skips by
kind, and the minutes. `--pytest NAME=SPEC` runs NAME's tests with `pytest SPEC` from a fresh venv (see
bench/feature_deletion.py); the package's own test dependencies must be importable by the interpreter that runs them.

    python bench/deletion_modes.py --sdist shortuuid==1.0.13 --sdist toolz==1.2.0 [--modes whole,auto] [--max-tasks N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# Run as a script, this file's folder heads sys.path and bench/feature_deletion.py would shadow the taskset module.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _fetchers():
    """bench/feature_deletion.py's `fetch_sdist` and `pytest_venv`, loaded under a name that shadows nothing."""
    spec = importlib.util.spec_from_file_location(
        "bench_feature_deletion", Path(__file__).with_name("feature_deletion.py")
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.fetch_sdist, module.pytest_venv


def mine(name: str, repo: Path, out: Path, mode: str, python: str, max_tasks: int | None) -> str:
    """One mining run; its table row."""
    from composer_prime.mining.config import MineConfig
    from composer_prime.mining.miner import Miner

    config = MineConfig(repo=repo, out=out, max_tasks=max_tasks, deletion=mode, test_cmd=[python, "-m", "pytest"])
    miner = Miner(config, log=lambda line: None)
    started = time.monotonic()
    try:
        tasks = miner.run()
    except Exception as exc:  # a package the miner refuses is a row, not the end of the table
        return (
            f"| {name} | {mode} | - | 0 | - | - | refused: {str(exc)[:120]} | {(time.monotonic() - started) / 60:.1f} |"
        )
    minutes = (time.monotonic() - started) / 60
    skipped = (
        json.loads(miner.skipped_path.read_text("utf-8")).get("skipped", {}) if miner.skipped_path.exists() else {}
    )
    kinds = Counter(str(reason).split(":", 1)[0] for reason in skipped.values())
    stubs = sum(task.feature.deletion == "stub" for task in tasks)
    f2p = statistics.mean(len(task.fail_to_pass) for task in tasks) if tasks else 0.0
    skips = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common()) or "none"
    tried = miner.stats.get("tried", 0)
    return f"| {name} | {mode} | {tried} | {len(tasks)} | {stubs} | {f2p:.1f} | {skips} | {minutes:.1f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", action="append", default=[], help="NAME==VERSION of a PyPI sdist to mine")
    parser.add_argument("--repo", action="append", default=[], type=Path, help="a local repository to mine")
    parser.add_argument("--modes", default="whole,stub,auto", help="comma-separated deletion modes, in table order")
    parser.add_argument("--max-tasks", type=int, default=None)
    parser.add_argument("--pytest", action="append", default=[], help="NAME=SPEC: run NAME's tests with pytest SPEC")
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    pins = dict(item.split("=", 1) for item in args.pytest)
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    fetch_sdist, pytest_venv = _fetchers()
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-deletion-modes-") as scratch:
        root = Path(scratch)
        packages: list[tuple[str, Path, str]] = [(repo.name, repo, sys.executable) for repo in args.repo]
        for spec in args.sdist:
            into = root / spec.replace("==", "-")
            into.mkdir()
            project = spec.split("==")[0]
            python = pytest_venv(pins[project], root / f"venv-{project}") if project in pins else sys.executable
            packages.append((spec, fetch_sdist(spec, into), python))
        for name, repo, python in packages:
            for mode in modes:
                row = mine(name, repo, root / "out" / f"{name}-{mode}.jsonl", mode, python, args.max_tasks)
                print(row, flush=True)
                rows.append(row)
    print("\n| package | mode | tried | kept | stubs | FAIL_TO_PASS / task | skipped | minutes |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
