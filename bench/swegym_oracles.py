"""Which SWE-Gym rows get a usable oracle (the gold patch's recorded behaviour, `swe_gym.oracle`), and why the rest
do not.

No Hugging Face hub or GitHub is reachable here, so the rows are built: eleven small pure-Python projects, each a git
repository with a real bug-fix commit, turned into SWE-Gym rows as SWE-Gym's are (`tests/support/swegym_rows.py`:
FAIL_TO_PASS / PASS_TO_PASS from real pytest runs). Each is then prepared with the real `swe-gym-prepare` (local
mode, `--validate-gold`: the gold patch must score with its replay, the untouched tree must not), which records every
oracle and prints the table: usable, then each reason in `oracle.REASONS` order. A row's reason that differs from the
one its project expects is printed after the table.

    python bench/swegym_oracles.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from swe_gym.oracle import load_oracle, oracle_path  # noqa: E402
from swe_gym.prepare import main as prepare  # noqa: E402

from tests.support.swegym_repo import write_jsonl  # noqa: E402
from tests.support.swegym_rows import PROJECTS, build_rows, local_config  # noqa: E402


def run(root: Path) -> int:
    rows, sources = build_rows(root / "src")
    data = write_jsonl(root / "rows.jsonl", rows)
    task = root / "task.json"
    # every row is validated, with its replay where it has a usable oracle (training leaves the rest out: "require")
    task.write_text(json.dumps({**local_config(root / "cache", sources), "replay": "if-usable"}))
    started = time.monotonic()
    code = prepare(["--data-file", str(data), "--task", "@", str(task), "--validate-gold"])
    print(f"\n{len(rows)} rows prepared, recorded and validated in {time.monotonic() - started:.1f}s\n")
    print("| project | FAIL_TO_PASS | calls seen | kept | oracle | detail |")
    print("|---|---|---|---|---|---|")
    differ = []
    for project, row in zip(PROJECTS, rows, strict=True):
        oracle = load_oracle(oracle_path(root / "cache" / "oracles", row["instance_id"]))
        assert oracle is not None, row["instance_id"]
        got = "usable" if oracle.usable else oracle.reason
        detail = oracle.detail or ", ".join(
            f"{name.replace('_', ' ')} {value}"
            for name, value in oracle.summary().items()
            if name in ("no_strict_form", "test_side", "private_state", "not_reproducible") and value
        )
        f2p = len(json.loads(row["FAIL_TO_PASS"]))
        print(f"| {project.name} | {f2p} | {oracle.seen} | {len(oracle.calls)} | {got} | {detail} |")
        if got != project.expected:
            differ.append(f"{project.name}: expected {project.expected}, got {got}")
    for line in differ:
        print("DIFFERS:", line)
    return code or (1 if differ else 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="build everything under this folder and keep it")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        return run(args.keep.resolve())
    with tempfile.TemporaryDirectory(prefix="swegym-oracles-") as scratch:
        return run(Path(scratch))


if __name__ == "__main__":
    sys.exit(main())
