"""The trusted pytest configuration of a grading run, derived from the repository's own (trusted) configuration.

pytest reads its configuration from the first of `pytest.toml`, `.pytest.toml`, `pytest.ini`, `.pytest.ini`,
`pyproject.toml`, `tox.ini`, `setup.cfg` it finds walking up from the arguments' common directory. Any of them
(or one in a parent directory shared by every box) can carry `addopts = -p plugin`. The grader therefore passes
`-c <ini outside the box>` and `--rootdir <work tree>`, which makes pytest read that file and no other.

Its content comes from the repository's configuration as the task recorded it before the agent ran: only keys
that choose, name or mark tests are carried over (`SAFE_KEYS`), and of `addopts` only the flags in
`SAFE_ADDOPTS`; anything that loads code (`-p`, `required_plugins`, `pytester`, ...) is dropped. `pythonpath`
lists the code under test, as absolute paths inside the work tree.
"""

from __future__ import annotations

import configparser
import fnmatch
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import PurePosixPath

CONFIG_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
"""Every file name pytest reads configuration from, in its order of precedence."""

SAFE_KEYS = frozenset(
    {
        "python_files",
        "python_classes",
        "python_functions",
        "markers",
        "filterwarnings",
        "xfail_strict",
        "norecursedirs",
        "doctest_optionflags",
        "doctest_encoding",
        "usefixtures",
        "empty_parameter_set_mark",
        "consider_namespace_packages",
        "asyncio_mode",
        "asyncio_default_fixture_loop_scope",
    }
)
SAFE_ADDOPTS = ("--doctest-modules", "--doctest-continue-on-failure", "--strict-markers", "--import-mode=")
"""`addopts` flags carried over (a prefix ending in `=` admits any value)."""


def _ini_section(text: str, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return dict(parser[section]) if parser.has_section(section) else None


def _toml_table(text: str, name: str) -> dict[str, str] | None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    table = data if name != "pyproject.toml" else data.get("tool", {}).get("pytest", {})
    if name == "pyproject.toml":
        table = table.get("ini_options", table) if isinstance(table, dict) else None
    elif isinstance(table, dict):
        table = table.get("pytest", table)
    if not isinstance(table, dict) or not table:
        return None
    return {key: "\n".join(map(str, value)) if isinstance(value, list) else str(value) for key, value in table.items()}


def repo_settings(configs: Mapping[str, str]) -> dict[str, str]:
    """pytest's settings from the root configuration files (`name -> text`) the repository had, as pytest picks."""
    for name in CONFIG_NAMES:
        text = configs.get(name)
        if text is None:
            continue
        if name.endswith(".toml"):
            found = _toml_table(text, name)
        else:
            found = _ini_section(text, "tool:pytest" if name == "setup.cfg" else "pytest")
        if found is not None:
            return found
    return {}


def _safe_addopts(value: str) -> list[str]:
    try:
        tokens = shlex.split(value)
    except ValueError:
        return []
    return [t for t in tokens if any(t == flag or (flag.endswith("=") and t.startswith(flag)) for flag in SAFE_ADDOPTS)]


def trusted_ini(settings: Mapping[str, str], workdir: str, pythonpath: list[str]) -> str:
    """The ini the grader pins with `-c`: the safe subset of `settings`, and `pythonpath` under `workdir`."""
    lines = ["[pytest]"]
    roots = [workdir.rstrip("/") + ("/" + entry.strip("/") if entry.strip("./") else "") for entry in pythonpath]
    for entry in settings.get("pythonpath", "").split():
        if not entry.startswith("/") and ".." not in entry.split("/"):
            roots.append(f"{workdir.rstrip('/')}/{entry.strip('/')}")
    lines.append("pythonpath = " + " ".join(dict.fromkeys(roots)))
    addopts = _safe_addopts(settings.get("addopts", ""))
    if addopts:
        lines.append("addopts = " + " ".join(addopts))
    for key in sorted(SAFE_KEYS & settings.keys()):
        value = settings[key].strip().replace("\n", "\n    ")
        lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
"""pytest's default `python_files`."""


def collected(settings: Mapping[str, str], path: str) -> bool:
    """Whether pytest, configured with the repository's `settings`, would collect the file at `path` (relative to
    the root) as a test module: its name (or, for a pattern holding a `/`, its path) matches `python_files`, and it
    lies under one of `testpaths` where the repository names any. A file the repository collects is the task's, not
    the agent's (`calc/tests.py` under `python_files = tests.py test_*.py`)."""
    if not path.endswith(".py"):
        return False
    patterns = settings.get("python_files", "").split() or list(DEFAULT_PYTHON_FILES)
    name = PurePosixPath(path).name
    if not any(fnmatch.fnmatch(path if "/" in pattern else name, pattern) for pattern in patterns):
        return False
    roots = [root.strip("/").removeprefix("./") for root in settings.get("testpaths", "").split()]
    return not roots or any(not root or root == "." or path.startswith(root + "/") for root in roots)
