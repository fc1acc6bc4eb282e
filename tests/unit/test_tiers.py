"""The suite runs its fast tier first: `pytest` with no arguments collects tests/unit before the subprocess-heavy
tiers, and no folder of tests is left out of the collection."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_unit_tests_are_collected_first_and_every_test_folder_is_collected():
    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert paths[0] == "tests/unit"
    folders = {f.parent for f in (ROOT / "tests").rglob("test_*.py")}
    uncollected = [f for f in folders if not any(f == ROOT / p or (ROOT / p) in f.parents for p in paths)]
    assert not uncollected, f"test folders outside pyproject's testpaths: {uncollected}"
