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

import ast
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


def _is_unittest_main(node: ast.stmt, names: set[str]) -> bool:
    """A module-level `unittest.main(...)` (or `main(...)` imported from unittest), as a statement."""
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "main":
        return isinstance(func.value, ast.Name) and func.value.id in names
    return isinstance(func, ast.Name) and func.id in names


def guarded_mains(files: dict[str, bytes]) -> tuple[dict[str, bytes], str] | None:
    """The test files that call `unittest.main()` at module level, rewritten to call it only when run as a script
    (`if __name__ == "__main__":`), and a line saying which; None when there are none.

    Unguarded, the call runs when pytest imports the module: it parses pytest's arguments as its own and raises
    `SystemExit`, which stops the whole collection (toposort 1.10's `test/test_toposort.py`). Under pytest the
    rewritten module defines the same tests; as a script it runs them as before. Only the call's own lines change."""
    changed: dict[str, bytes] = {}
    for path, data in sorted(files.items()):
        if not _matches(path, (*DEFAULT_PYTHON_FILES, *UNITTEST_FILES)) or b"main" not in data:
            continue
        try:
            text = data.decode("utf-8")
            tree = ast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        names = {"unittest"} | {
            alias.asname or alias.name
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module == "unittest"
            for alias in node.names
            if alias.name == "main"
        }
        names |= {
            alias.asname
            for node in tree.body
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "unittest" and alias.asname
        }
        calls = [node for node in tree.body if _is_unittest_main(node, names)]
        if not calls:
            continue
        lines = text.splitlines(keepends=True)
        for node in reversed(calls):
            start, end = node.lineno - 1, node.end_lineno or node.lineno
            body = ["    " + line if line.strip() else line for line in lines[start:end]]
            lines[start:end] = ['if __name__ == "__main__":\n', *body]
            if not lines[start + len(body)].endswith("\n"):
                lines[start + len(body)] += "\n"
        changed[path] = "".join(lines).encode()
    if not changed:
        return None
    names = ", ".join(list(changed)[:3]) + (", ..." if len(changed) > 3 else "")
    return changed, (
        f"collection: {names} call unittest.main() at module level, which ends pytest's collection; the mined tree "
        'calls it only under if __name__ == "__main__":'
    )
