"""Tests where packages keep them: unittest-style file names collected when pytest's defaults would miss them.

pytest collects `test_*.py` and `*_test.py` unless the repository's configuration says otherwise (`python_files`).
Many packages keep their tests as unittest does instead: `tests.py` (nameparser), `testtimeparse.py` (pytimeparse),
`footests.py`. The repository's own configuration comes first: when it names `python_files`, or when some file
matches pytest's defaults, nothing changes. Otherwise, when some file matches a unittest-style name
(`UNITTEST_FILES`), the mined tree gets a root `pytest.ini` holding the repository's pytest settings (if any) and
`python_files` widened to both sets of names: the miner, the agent's own `python -m pytest` and grading (which reads
the tree's configuration as recorded) then collect the same tests, and the file is restored before grading like every
pytest configuration. unittest's `TestCase` classes in those files are collected by pytest itself.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from composer_prime.grading.pytest_config import CONFIG_NAMES, DEFAULT_PYTHON_FILES, repo_settings

UNITTEST_FILES = ("tests.py", "test*.py", "*tests.py")
"""unittest-style test file names (unittest discovery's default is `test*.py`)."""
INI = "pytest.ini"


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    name = PurePosixPath(path).name
    return path.endswith(".py") and any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def widened_config(files: dict[str, bytes]) -> tuple[bytes, str] | None:
    """The root `pytest.ini` that makes pytest collect the tree's unittest-style test files, and a line saying why;
    None when the repository's own configuration or pytest's defaults already find its tests, or when it has none."""
    if any(_matches(path, DEFAULT_PYTHON_FILES) for path in files):
        return None
    found = sorted(path for path in files if _matches(path, UNITTEST_FILES) and "/." not in f"/{path}")
    if not found:
        return None
    configs = {name: files[name].decode("utf-8", "replace") for name in CONFIG_NAMES if name in files}
    settings = repo_settings(configs)
    if "python_files" in settings:
        return None
    shadowed = [name for name in ("pytest.toml", ".pytest.toml") if name in configs]
    if shadowed:  # these win over pytest.ini: writing one would change nothing
        return None
    lines = ["[pytest]"]
    for key, value in settings.items():
        lines.append(f"{key} = " + value.strip().replace("\n", "\n    "))
    lines.append("python_files = " + " ".join(dict.fromkeys((*DEFAULT_PYTHON_FILES, *UNITTEST_FILES))))
    source = next((name for name in CONFIG_NAMES if name in configs and name != INI), None)
    why = (
        f"collection: pytest's default names find no test file, unittest-style ones find {len(found)} "
        f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}); the mined tree gets a root {INI} with "
        "python_files widened" + (f" and {source}'s pytest settings" if source and settings else "")
    )
    return ("\n".join(lines) + "\n").encode(), why
