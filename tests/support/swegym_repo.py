"""A small git project with a real bug-fix history, and the SWE-Gym row derived from it, for swe-gym tests.

History of `toy/calc` (every commit made with real git):

    c1  "calc: add"                      calc/ops.py with add(); tests/test_ops.py; tests/conftest.py (a fixture)
    c2  "calc: clamp" = base_commit      clamp() with a bug (values above `hi` pass through); its low-side test
    c3  "fix clamp above hi"             the fix, a new test in tests/test_ops.py and a new tests/test_clamp.py
        tag v0.2, branch `release`       (future refs the box must not carry)

The row is derived exactly as SWE-Gym's are: `patch` = the fix commit's diff of non-test files, `test_patch` =
its diff of tests/, FAIL_TO_PASS = tests that fail at c2 and pass at c3, PASS_TO_PASS = tests passing at both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPS_C1 = "def add(a, b):\n    return a + b\n"
OPS_C2 = OPS_C1 + (
    "\n\ndef clamp(x, lo, hi):\n"
    '    """Limit x to the closed range [lo, hi]."""\n'
    "    if x < lo:\n"
    "        return lo\n"
    "    return x\n"
)
OPS_C3 = OPS_C2.replace(
    "        return lo\n    return x\n", "        return lo\n    if x > hi:\n        return hi\n    return x\n"
)
TESTS_C1 = "from calc.ops import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TESTS_C2 = TESTS_C1.replace("from calc.ops import add\n", "from calc.ops import add, clamp\n") + (
    "\n\ndef test_clamp_low():\n    assert clamp(-4, 0, 3) == 0\n"
)
TESTS_C3 = TESTS_C2 + "\n\ndef test_clamp_high():\n    assert clamp(9, 0, 5) == 5\n"
TEST_CLAMP_C3 = (
    "import pytest\n\nfrom calc.ops import clamp\n\n\n"
    '@pytest.mark.parametrize("x,expected", [(-1, 0), (2, 2), (7, 3)])\n'
    "def test_clamp_range(x, expected):\n    assert clamp(x, 0, 3) == expected\n"
)
CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef unit_range():\n    return (0, 1)\n"
"""The repository's own `tests/conftest.py` (an agent may edit it legitimately)."""
FIX_SECRET = "if x > hi:"
"""A line only the fix commit has: the box must not be able to find it anywhere in its git objects."""

PROBLEM = "clamp(x, lo, hi) returns x unchanged when x is above hi; it should return hi."

FAIL_TO_PASS = ["tests/test_ops.py::test_clamp_high", "tests/test_clamp.py::test_clamp_range[7-3]"]
PASS_TO_PASS = [
    "tests/test_ops.py::test_add",
    "tests/test_ops.py::test_clamp_low",
    "tests/test_clamp.py::test_clamp_range[-1-0]",
    "tests/test_clamp.py::test_clamp_range[2-2]",
]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **GIT_ENV},
    )
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


def _commit(repo: Path, files: dict[str, str], message: str, date: str) -> str:
    for path, content in files.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, f"--date={date}")
    return git(repo, "rev-parse", "HEAD").strip()


@dataclass
class ToyInstance:
    repo: Path
    row: dict[str, Any]
    base_commit: str
    fix_commit: str


OWN_RULES_INI = "[pytest]\npython_files = tests.py test_*.py\n"
"""With `own_rules`: the repository's own collection rules, which also collect `calc/tests.py`."""
OWN_RULES_TESTS = "from calc.ops import add\n\n\ndef test_add_negative():\n    assert add(-1, -1) == -2\n"
OWN_RULES_TEST = "calc/tests.py::test_add_negative"
"""A PASS_TO_PASS test in a file only the repository's `python_files` makes a test file."""


def build_toy_instance(root: Path, own_rules: bool = False) -> ToyInstance:
    """The toy instance; with `own_rules`, c1 also adds `pytest.ini` (`python_files = tests.py test_*.py`) and
    `calc/tests.py`, whose test joins PASS_TO_PASS."""
    repo = root / "calc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "--initial-branch=main")
    first = {
        "calc/__init__.py": "",
        "calc/ops.py": OPS_C1,
        "tests/test_ops.py": TESTS_C1,
        "tests/conftest.py": CONFTEST,
    }
    if own_rules:
        first |= {"pytest.ini": OWN_RULES_INI, "calc/tests.py": OWN_RULES_TESTS}
    _commit(repo, first, "calc: add", "2024-01-01T10:00:00Z")
    base = _commit(repo, {"calc/ops.py": OPS_C2, "tests/test_ops.py": TESTS_C2}, "calc: clamp", "2024-01-02T10:00:00Z")
    fix = _commit(
        repo,
        {"calc/ops.py": OPS_C3, "tests/test_ops.py": TESTS_C3, "tests/test_clamp.py": TEST_CLAMP_C3},
        "fix clamp above hi",
        "2024-01-03T10:00:00Z",
    )
    git(repo, "tag", "v0.2", fix)
    git(repo, "branch", "release", fix)
    row = {
        "instance_id": "toy__calc-7",
        "repo": "toy/calc",
        "base_commit": base,
        "problem_statement": PROBLEM,
        "patch": git(repo, "diff", base, fix, "--", "calc"),
        "test_patch": git(repo, "diff", base, fix, "--", "tests"),
        # SWE-Gym on the hub stores the two lists JSON-encoded.
        "FAIL_TO_PASS": json.dumps(FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(PASS_TO_PASS + ([OWN_RULES_TEST] if own_rules else [])),
        "version": "0.1",
        "hints_text": "",
        "created_at": "2024-01-03T10:00:00Z",
    }
    return ToyInstance(repo=repo, row=row, base_commit=base, fix_commit=fix)


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def local_task_config(cache: Path, repo: Path) -> dict[str, Any]:
    """Local mode for the toy repo: a bare venv from this interpreter that sees this interpreter's pytest."""
    import pytest

    return {
        "local": {
            "cache_dir": str(cache),
            "repo_sources": {"toy/calc": str(repo)},
            "env": {"python": sys.executable, "install": [], "with_pip": False, "pythonpath": ["."]},
            "site_packages": [str(Path(pytest.__file__).resolve().parent.parent)],
        },
        "test_timeout_s": 120,
    }
