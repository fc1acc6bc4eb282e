"""What `mine-corpus` mines: a PyPI sdist or a git repository at a ref, fetched on the host, and what its metadata says.

An sdist is downloaded as bytes from the configured find-links or index (`sdist.py`: no pip, no build backend, none of
the package's code runs on the host), unpacked with tarfile's `data` filter (no absolute paths, no links out of the
tree) and read from its `PKG-INFO`; an sdist without one is refused. A git repository is fetched at
one ref (`git fetch --depth 1`, a branch, a tag or a commit the server serves) into a work tree. Neither copy ever
enters an environment image: the miner reaches it through a mount (`box`).

`read_metadata` reads, without running the project's build: its name and version, its license (`License-Expression`,
else `License`, else the trove classifiers), its runtime requirements and its test requirements (the extras and
dependency groups named `test`, `tests` or `testing`, and `requirements-test.txt`-style files). The sdist's
`PKG-INFO` comes first, then `*.egg-info/requires.txt` (older setuptools sdists), then `pyproject.toml`'s `[project]`
and `setup.cfg`'s `[options]` (git trees have no `PKG-INFO`).
"""

from __future__ import annotations

import configparser
import re
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from composer_prime.corpus import sdist
from composer_prime.process.commands import run_checked_host

TEST_NAMES = ("test", "tests", "testing")
"""Extras and dependency groups that hold a project's test requirements."""
REQUIREMENT_FILES = (
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "requirements-tests.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "tests/requirements.txt",
)
FETCH_TIMEOUT_S = 900.0


class SourceError(Exception):
    """A package could not be fetched or read; the message names the package and the cause."""


@dataclass(frozen=True)
class Metadata:
    """What the project says about itself."""

    name: str
    version: str
    license: str | list[str] | None
    requires: list[str] = field(default_factory=list)
    """Runtime requirements (PEP 508 strings, markers kept)."""
    test_requires: list[str] = field(default_factory=list)
    """Test extras, dependency groups and requirement files (PEP 508 strings, markers kept)."""


def pip_index_args(index_url: str | None, find_links: list[str]) -> list[str]:
    """pip's options for the configured index and find-links folders (the wheels of the image's pins)."""
    args = ["--index-url", index_url] if index_url else []
    for link in find_links:
        args += ["--find-links", link]
    return args


def fetch_sdist(spec: str, into: Path, index_url: str | None, find_links: list[str]) -> Path:
    """Download the sdist of `spec` (`NAME==VERSION`) from `find_links` or the index (`sdist.fetch`: bytes only, no
    build) and unpack it under `into`; its project folder. One without a `PKG-INFO` is refused: its metadata would
    need its build backend, which is the package's own code and never runs on this machine."""
    name, version = spec.split("==", 1)
    try:
        path = sdist.fetch(name, version, into / "sdist", index_url, find_links)
    except sdist.FetchError as err:
        raise SourceError(str(err)) from None
    tree = into / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    try:
        if path.name.lower().endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise SourceError(f"{spec}: the sdist holds a path outside its tree ({member!r})")
                archive.extractall(tree)
        else:
            with tarfile.open(path) as archive:
                archive.extractall(tree, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as err:
        raise SourceError(f"{spec}: {path.name} cannot be unpacked ({err}); check the file on the index") from None
    folders = [p for p in tree.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise SourceError(f"{spec}: the sdist unpacks to {len(folders)} folders, expected one project folder")
    if not (folders[0] / "PKG-INFO").is_file():
        raise SourceError(
            f"{spec}: {path.name} has no PKG-INFO, so its metadata would need a build (its own code on this "
            "machine), which mine-corpus does not run; mine it as a [[repos]] entry at its release tag instead"
        )
    return folders[0]


def fetch_git(url: str, ref: str, into: Path, folder: str) -> Path:
    """Fetch `ref` (a branch, tag or commit) of the repository at `url` into the work tree `into/tree/<folder>` (the
    folder's name is the mined tasks' `repo`, as an sdist's `<name>-<version>` is)."""
    tree = into / "tree" / folder
    tree.mkdir(parents=True, exist_ok=True)
    for argv in (
        ["git", "init", "-q", str(tree)],
        ["git", "-C", str(tree), "fetch", "-q", "--depth", "1", url, ref],
        ["git", "-C", str(tree), "-c", "advice.detachedHead=false", "checkout", "-q", "FETCH_HEAD"],
    ):
        run_checked_host(argv, error=SourceError, timeout_s=FETCH_TIMEOUT_S)
    return tree


def read_metadata(tree: Path, fallback_name: str, fallback_version: str) -> Metadata:
    """The project's name, version, license and requirements, read from its files (nothing is built or run)."""
    pkg_info = tree / "PKG-INFO"
    if pkg_info.is_file():
        message = HeaderParser().parsestr(pkg_info.read_text("utf-8", "replace"))
        requires = message.get_all("Requires-Dist") or []
        if not requires:
            requires = _egg_info_requires(tree)
        runtime, tests = _split_extras(requires)
        return Metadata(
            name=message.get("Name") or fallback_name,
            version=message.get("Version") or fallback_version,
            license=license_of(
                message.get("License-Expression"), message.get("License"), message.get_all("Classifier") or []
            ),
            requires=runtime,
            test_requires=tests + _pyproject_groups(tree) + _requirement_files(tree),
        )
    project = _pyproject(tree).get("project", {})
    setup_cfg = configparser.ConfigParser(interpolation=None)
    if (tree / "setup.cfg").is_file():
        setup_cfg.read(tree / "setup.cfg", encoding="utf-8")
    raw_license = project.get("license")
    if isinstance(raw_license, dict):
        raw_license = raw_license.get("text")
    cfg_license = setup_cfg.get("metadata", "license", fallback=None)
    classifiers = project.get("classifiers") or setup_cfg.get("metadata", "classifiers", fallback="").splitlines()
    requires = list(
        project.get("dependencies") or _cfg_lines(setup_cfg.get("options", "install_requires", fallback=""))
    )
    extras = dict(project.get("optional-dependencies") or {})
    if setup_cfg.has_section("options.extras_require"):
        extras |= {k: _cfg_lines(v) for k, v in setup_cfg.items("options.extras_require")}
    return Metadata(
        name=project.get("name") or setup_cfg.get("metadata", "name", fallback=None) or fallback_name,
        version=str(project.get("version") or fallback_version),
        license=license_of(None, raw_license if isinstance(raw_license, str) else cfg_license, classifiers),
        requires=requires,
        test_requires=[req for name in TEST_NAMES for req in extras.get(name, [])]
        + _pyproject_groups(tree)
        + _requirement_files(tree),
    )


def license_of(expression: str | None, text: str | None, classifiers: list[str]) -> str | list[str] | None:
    """`License-Expression`; else the whole `License` field and the license trove classifiers, both kept when both are
    stated (a list: `licenses.classify` then requires every part to allow redistribution, so a `License` of MIT beside
    a proprietary classifier, or an MIT text with a clause added, is not read as MIT); else whichever there is."""
    if expression and expression.strip():
        return expression.strip()
    stated = text.strip() if text and text.strip() and text.strip().upper() != "UNKNOWN" else None
    named = [c.strip() for c in classifiers if c.strip().startswith("License ::")]
    parts = ([stated] if stated else []) + named
    if not parts:
        return None
    return parts[0] if len(parts) == 1 and stated else parts


def _split_extras(requires: list[str]) -> tuple[list[str], list[str]]:
    """Requires-Dist lines -> (runtime, test extras); the `extra == "..."` clause is dropped, other markers kept."""
    runtime, tests = [], []
    for line in requires:
        requirement, _, marker = line.partition(";")
        extras = re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
        rest = re.sub(r"""(and\s+)?extra\s*==\s*['"][^'"]+['"](\s+and)?""", "", marker).strip()
        text = requirement.strip() + (f"; {rest}" if rest else "")
        if not extras:
            runtime.append(text)
        elif any(_normal(extra) in TEST_NAMES for extra in extras):
            tests.append(text)
    return runtime, tests


def _egg_info_requires(tree: Path) -> list[str]:
    """`*.egg-info/requires.txt` as Requires-Dist lines (`[extra]` / `[extra:marker]` / `[:marker]` sections)."""
    found = sorted(tree.glob("*.egg-info/requires.txt")) + sorted(tree.glob("src/*.egg-info/requires.txt"))
    if not found:
        return []
    lines, extra, marker = [], "", ""
    for raw in found[0].read_text("utf-8", "replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            extra, _, marker = line.strip("[]").partition(":")
            continue
        clauses = [f"({marker})"] if marker else []
        clauses += [f'extra == "{extra}"'] if extra else []
        lines.append(line + ("; " + " and ".join(clauses) if clauses else ""))
    return lines


def _pyproject(tree: Path) -> dict:
    path = tree / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return {}


def _pyproject_groups(tree: Path) -> list[str]:
    """PEP 735 dependency groups named like a test group (`{include-group = ...}` entries followed)."""
    groups = _pyproject(tree).get("dependency-groups", {})

    def expand(name: str, seen: frozenset[str]) -> list[str]:
        out = []
        for item in groups.get(name, []):
            if isinstance(item, str):
                out.append(item)
            elif isinstance(item, dict) and item.get("include-group") not in seen:
                out += expand(item["include-group"], seen | {item["include-group"]})
        return out

    return [req for name in groups if _normal(name) in TEST_NAMES for req in expand(name, frozenset({name}))]


def _requirement_files(tree: Path) -> list[str]:
    """Plain requirement lines of test requirement files (options, includes, editables and URLs left out)."""
    out = []
    for name in REQUIREMENT_FILES:
        if (tree / name).is_file():
            for raw in (tree / name).read_text("utf-8", "replace").splitlines():
                line = raw.split(" #", 1)[0].strip()
                if line and not line.startswith(("#", "-", ".", "/")) and "://" not in line:
                    out.append(line)
    return out


def _cfg_lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
