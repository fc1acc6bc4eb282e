"""Issue 43, line 2: a package that keeps its tests as unittest does (a root `tests.py` of `TestCase` classes, as
nameparser 1.1.3 does) gives tasks: the miner adds the root pytest.ini that collects it, and grading, which reads the
task's configuration, collects the same tests. Real git, real pytest subprocesses, the gold graded in a fresh box."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from composer_prime.mining.config import MineConfig
from composer_prime.mining.miner import Miner
from composer_prime.mining.record import load_rows
from tests.e2e.featdel.test_featdel_env import load_tasks, score_in_fresh_box

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("python_on_path")]

NAMES = '''"""Split people's names."""


def first_name(full):
    """The first word of `full`."""
    words = full.split()
    return words[0] if words else ""


def last_name(full):
    """The last word of `full`."""
    words = full.split()
    return words[-1] if words else ""
'''

TESTS = """import unittest

from names.core import first_name, last_name


class FirstNameTests(unittest.TestCase):
    def test_two_words(self):
        self.assertEqual(first_name("Ada Lovelace"), "Ada")

    def test_empty(self):
        self.assertEqual(first_name(""), "")


class LastNameTests(unittest.TestCase):
    def test_two_words(self):
        self.assertEqual(last_name("Ada Lovelace"), "Lovelace")


if __name__ == "__main__":
    unittest.main()
"""


def mine_names(tmp_path: Path, tests: str = TESTS, **config: object) -> tuple[Path, list[str]]:
    """The names package with `tests` as its root `tests.py`, mined; the tasks file and the miner's log lines."""
    repo = tmp_path / "names-repo"
    for path, text in {"names/__init__.py": "", "names/core.py": NAMES, "tests.py": tests}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    out = tmp_path / "out" / "tasks.jsonl"
    lines: list[str] = []
    Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0, **config), log=lines.append).run()
    return out, lines


def test_a_root_tests_py_of_testcases_is_mined_and_graded(tmp_path: Path) -> None:
    out, lines = mine_names(tmp_path)
    assert any("unittest-style ones find 1 (tests.py)" in line for line in lines), lines
    rows = {row.feature.qualname: row for row in load_rows(out)[0]}
    assert rows["first_name"].fail_to_pass == [
        "tests.py::FirstNameTests::test_empty",
        "tests.py::FirstNameTests::test_two_words",
    ]
    assert rows["first_name"].pass_to_pass == ["tests.py::LastNameTests::test_two_words"]
    assert "pytest.ini" in rows["first_name"].test_files and "tests.py" in rows["first_name"].held_out
    task = load_tasks(out)["names-repo:names/core.py::first_name"]
    valid, _ = score_in_fresh_box(task, gold=True)
    assert valid is True
    _, trace = score_in_fresh_box(task, gold=False)
    assert trace.reward == 0.0 and trace.info["grading"]["void"] == []
    assert sorted(trace.info["grading"]["fail_to_pass_failed"]) == rows["first_name"].fail_to_pass


def test_a_module_level_unittest_main_no_longer_ends_collection(tmp_path: Path) -> None:
    """toposort 1.10 ends its test module with a bare `unittest.main()`: under pytest it parses pytest's arguments and
    raises SystemExit, so no test was collected and the package gave no task. The mined tree guards the call."""
    unguarded = TESTS.replace('if __name__ == "__main__":\n    unittest.main()\n', "unittest.main()\n")
    out, lines = mine_names(tmp_path, unguarded)
    assert any("tests.py call unittest.main() at module level" in line for line in lines), lines
    rows = {row.feature.qualname: row for row in load_rows(out)[0]}
    assert rows["first_name"].fail_to_pass == [
        "tests.py::FirstNameTests::test_empty",
        "tests.py::FirstNameTests::test_two_words",
    ]
    valid, _ = score_in_fresh_box(load_tasks(out)["names-repo:names/core.py::first_name"], gold=True)
    assert valid is True


def test_the_closing_line_says_what_max_tasks_left_untried(tmp_path: Path) -> None:
    out, lines = mine_names(tmp_path, max_tasks=1)
    assert len(load_rows(out)[0]) == 1
    assert lines[-1].endswith("; skipped: none; 1 candidate(s) not tried (--max-tasks 1 reached)"), lines[-1]
