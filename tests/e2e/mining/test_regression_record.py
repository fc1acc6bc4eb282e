"""The PASS_TO_PASS tests' recorded calls (`composer_prime.mining.regression`): real pytest runs with the recorder and
real lone replays on tiny repositories, no part of the project mocked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from composer_prime.mining import regression
from composer_prime.mining.regression import record_suite_calls, unaffected

pytestmark = pytest.mark.slow

TEST_CMD = [sys.executable, "-m", "pytest"]

LIB = """\
def square(n):
    return n * n


def halve(n):
    return n / 2


def tally(items):
    return {"count": len(items)}


class Box:
    def __init__(self):
        self._held = []

    def put(self, item):
        self._held.append(item)
        return len(self._held)
"""
TESTS = """\
import pytest

from lib.core import Box, halve, square, tally


@pytest.mark.parametrize("n", range(10))
def test_square(n):
    assert square(n) == n * n


def test_many_calls():
    for n in range(10):
        assert halve(n) == n / 2


def test_tally():
    assert tally([1, 2]) == {"count": 2}


def test_box():
    box = Box()
    box.put(1)
    assert box.put(2) == 2
"""


def repo(root: Path, lib: str = LIB) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "core.py").write_text(lib)
    (root / "tests").mkdir()
    (root / "tests" / "test_core.py").write_text(TESTS)
    return root


def test_the_recording_keeps_a_few_calls_of_each_test_and_function(tmp_path: Path) -> None:
    gold = repo(tmp_path / "gold")
    tests = [f"tests/test_core.py::test_square[{n}]" for n in range(10)]
    tests += ["tests/test_core.py::test_many_calls", "tests/test_core.py::test_tally", "tests/test_core.py::test_box"]
    calls, skipped = record_suite_calls(TEST_CMD, gold, tests, 60)
    by_target: dict[str, int] = {}
    by_test: dict[str, int] = {}
    for call in calls:
        by_target[call.target] = by_target.get(call.target, 0) + 1
        by_test[call.test] = by_test.get(call.test, 0) + 1
    # ten tests call `square` once each: the first PER_TARGET are kept; one test calls `halve` ten times: PER_TEST
    assert by_target["lib.core:square"] == regression.PER_TARGET
    assert by_test["tests/test_core.py::test_many_calls"] == regression.PER_TEST
    assert by_target["lib.core:tally"] == 1
    # `Box.put` is handed an instance with private state (`self._held`): never rebuilt from the gold's layout
    assert not any(call.target.startswith("lib.core:Box.put") for call in calls)
    assert skipped >= 1
    # deterministic: a second recording keeps the same calls
    again, _ = record_suite_calls(TEST_CMD, gold, tests, 60)
    assert [c.model_dump() for c in again] == [c.model_dump() for c in calls]


def test_only_calls_the_starting_tree_answers_alike_are_kept(tmp_path: Path) -> None:
    """`halve` differs between the gold and the starting tree (the task changes it: the feature's to judge); `square`
    and `tally` do not (a regression there is what the replay must see)."""
    gold = repo(tmp_path / "gold")
    starting = repo(tmp_path / "start", LIB.replace("return n / 2", "return n // 2"))
    tests = [
        "tests/test_core.py::test_square[3]",
        "tests/test_core.py::test_many_calls",
        "tests/test_core.py::test_tally",
    ]
    calls, _ = record_suite_calls(TEST_CMD, gold, tests, 60)
    kept = unaffected(TEST_CMD, starting, calls, 60)
    assert {c.target for c in calls} == {"lib.core:square", "lib.core:halve", "lib.core:tally"}
    # halve(0) answers 0 either way; halve(1) and halve(2) answer 0.5 / 0 and 1.0 / 1 (1.0 == 1: one value)
    assert [c.args for c in kept if c.target == "lib.core:halve"] == [[["int", "0"]], [["int", "2"]]]
    assert {c.target for c in kept} == {"lib.core:square", "lib.core:halve", "lib.core:tally"}
