"""Issue 43, line 1: a package whose test module imports every public name at the top (shortuuid's shape) gives
precise tasks in the `stub` deletion mode, where the whole deletion stops that module from collecting. Real git,
real pytest subprocesses, and the stub task's gold graded in a fresh box on the subprocess runtime."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from composer_prime.mining.config import MineConfig
from composer_prime.mining.miner import Miner
from composer_prime.mining.record import load_rows
from tests.e2e.featdel.test_featdel_env import load_tasks, score_in_fresh_box

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("python_on_path")]

CORE = '''"""Small numeric helpers."""


def double(x):
    """Twice `x`."""
    result = x + x
    return result


def square(x):
    """`x` times itself."""
    result = x * x
    return result


class Counter:
    """Counts up from `start`."""

    def __init__(self, start=0):
        self.value = start

    def bump(self, by=1):
        """Add `by` and return the new value."""
        self.value += by
        return self.value
'''

TEST_CORE = """from numbers_pkg.core import Counter, double, square


def test_double():
    assert double(3) == 6


def test_double_negative():
    assert double(-2) == -4


def test_square():
    assert square(4) == 16


def test_counter_bumps():
    counter = Counter(2)
    assert counter.bump() == 3 and counter.bump(5) == 8
"""

OTHER = '''"""Unrelated."""


def shout(text):
    """Upper case with a bang."""
    loud = text.upper()
    return loud + "!"
'''

TEST_OTHER = """from numbers_pkg.other import shout


def test_shout():
    assert shout("hi") == "HI!"
"""


def _repo(root: Path) -> Path:
    repo = root / "numbers-repo"
    for path, text in {
        "numbers_pkg/__init__.py": "",
        "numbers_pkg/core.py": CORE,
        "numbers_pkg/other.py": OTHER,
        "tests/test_core.py": TEST_CORE,
        "tests/test_other.py": TEST_OTHER,
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    return repo


def _mine(repo: Path, out: Path, deletion: str) -> dict:
    config = MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0, deletion=deletion)
    Miner(config, log=lambda line: None).run()
    return {row.feature.qualname: row for row in load_rows(out)[0]}


def test_auto_gives_each_feature_its_own_tests_where_whole_breaks_collection(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    whole = _mine(repo, tmp_path / "whole" / "tasks.jsonl", "whole")
    auto = _mine(repo, tmp_path / "auto" / "tasks.jsonl", "auto")
    core_tests = [
        f"tests/test_core.py::{name}" for name in ("test_counter_bumps", "test_double", "test_double_negative")
    ]
    core_tests.append("tests/test_core.py::test_square")
    # whole: deleting `double` stops tests/test_core.py from importing, so all four of its tests are FAIL_TO_PASS
    assert whole["double"].feature.deletion == "whole"
    assert sorted(whole["double"].fail_to_pass) == core_tests
    # auto: the name stays, its body raises; only the tests that call it fail
    assert auto["double"].feature.deletion == "stub"
    assert auto["double"].fail_to_pass == [
        "tests/test_core.py::test_double",
        "tests/test_core.py::test_double_negative",
    ]
    assert auto["Counter.bump"].fail_to_pass == ["tests/test_core.py::test_counter_bumps"]
    # a method's whole deletion leaves every module collecting: it stays whole
    assert auto["Counter.bump"].feature.deletion == "whole"
    row = auto["double"]
    ((first, last, replacement),) = row.changes["numbers_pkg/core.py"]
    assert "".join(replacement) == 'def double(x):\n    """Twice `x`."""\n    raise NotImplementedError\n'
    assert "result = x + x" not in row.prompt and "raises `NotImplementedError`" in row.prompt


def test_a_stub_task_grades_gold_one_and_untouched_zero(tmp_path: Path) -> None:
    out = tmp_path / "stub" / "tasks.jsonl"
    _mine(_repo(tmp_path), out, "stub")
    task = load_tasks(out)["numbers-repo:numbers_pkg/core.py::square"]
    valid, _ = score_in_fresh_box(task, gold=True)
    assert valid is True
    _, trace = score_in_fresh_box(task, gold=False)
    assert trace.reward == 0.0
    grading = trace.info["grading"]
    assert (
        grading["error"] is None
        and grading["void"] == []
        and grading["fail_to_pass_failed"] == ["tests/test_core.py::test_square"]
    )
