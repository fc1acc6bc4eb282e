"""What the agent changed in the work tree, judged against the tree as it was before the agent ran.

A `Manifest` maps each file of that starting tree to the sha256 of its bytes; it is taken where the agent cannot
reach it (from the task's snapshot on the host, or in the box before the agent starts). At grading the box's files
are listed again (`LIST_FILES`) and compared:

- **strays**: files the agent added that are not plain modules or data files of the task's own packages
  (`allowed_addition`) are removed before the tests run: added test modules and `conftest.py` files, `pytest.py`
  shims, new top-level packages (`src/pytest/`), `sitecustomize.py`/`usercustomize.py`, `.pth` files, native code,
  configuration, symlinks;
- **the scan**: every added line of every changed or added `.py` file is searched for test-machinery patterns
  (`MACHINERY`): pytest hooks and plugin registration, report objects and internals, pluggy, pytest's modules
  looked up in `sys.modules`, import path hooks. A hit voids the grade and the reason is recorded. Legitimate edits to an existing
  `conftest.py` (a fixture, a marker) pass; a forged pass does not.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

Manifest = dict[str, str]
"""Repository-relative path -> sha256 hex of the file's bytes."""

HASH_BYTES = 64 << 20
"""A regular file larger than this is listed by its size, not hashed (a sparse file of terabytes would hold the
listing for minutes): its digest is `?<size>`, which no sha256 equals, so against a host-held manifest it counts as
changed; two listings in the box (swe-gym's baseline and grading) see it unchanged while its size is."""
LISTING_BYTES = 32 << 20
"""A listing longer than this is cut, and grading voids (a tree of hundreds of thousands of files)."""
LIST_FILES = (
    f"{{ find . -path ./.git -prune -o -type f -links 1 -size -{HASH_BYTES + 1}c -exec sha256sum -z -- {{}} + && "
    f"find . -path ./.git -prune -o -type f \\( -size +{HASH_BYTES}c -o -links +1 \\) -printf 'b %s %P\\0' "
    "-o -type l -printf 'l %P\\0' "
    "-o -type d -printf 'd %P\\0' -o ! -type f -printf 'o %P\\0'; "
    f"printf 'e %s\\0' $?; }} | head -c {LISTING_BYTES}"
)
"""In-box command, NUL-terminated entries, `.git` skipped: `sha256  ./path` per regular file, `b <size> path` per file
over `HASH_BYTES` or with more than one link (300 links to one 64 MiB file would be hashed 300 times, and the listing
outlast the grading's time limit; a checkout holds no hard links, so such a file counts as changed, as a big one),
`l path` per symlink, `d path` per folder, `o path` per anything else (a fifo, a socket, a device), and last
`e <status>`, the two `find`s' exit status; cut at `LISTING_BYTES` (then the `e` entry is missing)."""

REMOVE_BYTECODE = (
    "find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf -- {} + -o "
    "-type f \\( -name '*.pyc' -o -name '*.pyo' \\) -exec rm -f -- {} +"
)
"""In-box command: every `__pycache__` folder and `.pyc`/`.pyo` file of the tree removed (`.git` skipped)."""

STARTUP_NAMES = frozenset({"sitecustomize.py", "usercustomize.py"})
TEST_DIRS = frozenset({"tests", "test", "testing"})

MACHINERY = [
    ("a pytest hook", re.compile(r"\bdef\s+pytest_\w+|\bpytest_plugins\b")),
    ("pytest plugin machinery", re.compile(r"pluginmanager|hookimpl|hookwrapper|hookspec|\bpluggy\b")),
    ("pytest internals", re.compile(r"\b_pytest\b|\bTestReport\b|\bCallInfo\b|\blongrepr\b|\bpytest\.main\b")),
    ("report rewriting", re.compile(r"\.outcome\s*=\s*['\"](?:passed|failed|skipped)\b|\bwasxfail\b")),
    ("sys.modules games", re.compile(r"\bmodules\s*\[\s*['\"](?:_?pytest|pluggy)")),
    ("import-system hooks", re.compile(r"\bpath_hooks\b|\bbuiltins\.__import__\s*=[^=]")),
]
"""(reason, pattern) pairs; any added line matching one voids the grade. Only patterns honest code does not use:
`bench/scan_hits.py` measures them on the non-test source of 20 popular PyPI packages (0 hits). Idioms honest
libraries use are left to the defences that do not depend on spelling: `sys.modules[...]`, `__import__(...)` and
`sys.meta_path` (canaries and replay), `atexit`, `os._exit` and `sys.excepthook` (the outcome stream closes before
exit handlers run, and a session that ends before every collected test reported voids), `sitecustomize` and `.pth`
(the launcher runs with `-S`, strays are removed, site folders' `.pth` files are fingerprinted), `keywords[...]` and
`.outcome = <variable>` (canaries)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Listing:
    """A `LIST_FILES` run, parsed."""

    files: Manifest = field(default_factory=dict)
    """Regular files: path -> sha256 (a file over `HASH_BYTES`: `?<size>`)."""
    links: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    """Fifos, sockets, devices."""
    problem: str | None = None
    """Why the listing cannot be trusted whole: cut at `LISTING_BYTES`, a `find` that failed (an unreadable folder or
    file), a path that is not UTF-8."""


def read_listing(stdout: str) -> Listing:
    """Parse a `LIST_FILES` run (see `Listing`)."""
    seen = Listing()
    status: str | None = None
    for entry in stdout.split("\0"):
        kind, _, path = entry.partition(" ")
        if kind == "e" and path:
            status = path
        elif kind == "b" and " " in path:
            size, _, path = path.partition(" ")
            seen.files[path] = f"?{size}"
        elif kind in ("l", "d", "o") and path:
            {"l": seen.links, "d": seen.dirs, "o": seen.others}[kind].append(path)
        elif "  " in entry:
            digest, path = entry.split("  ", 1)
            seen.files[path.removeprefix("./")] = digest
    undecoded = next((p for p in [*seen.files, *seen.links, *seen.dirs, *seen.others] if "\ufffd" in p), None)
    if status is None:
        seen.problem = f"the work tree's listing is over {LISTING_BYTES} bytes (too many files to grade)"
    elif status != "0":
        seen.problem = f"listing the work tree failed (find exit {status}): an unreadable file or folder"
    elif undecoded is not None:
        seen.problem = f"a path that is not UTF-8 (or holds U+FFFD) in the work tree: {undecoded[:200]!r}"
    return seen


def parse_listing(stdout: str) -> tuple[Manifest, list[str]]:
    """The regular files (path -> sha256) and the symlinks of a `LIST_FILES` run."""
    seen = read_listing(stdout)
    return seen.files, seen.links


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return (
        name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" or bool(TEST_DIRS & set(parts))
    )


def source_dirs(paths: Iterable[str]) -> set[str]:
    """Folders of the starting tree that hold a non-test Python module: where a new module may be added."""
    return {str(PurePosixPath(p).parent) for p in paths if p.endswith(".py") and not is_test_path(p)}


NOT_DATA = frozenset(
    {".py", ".pyc", ".pyo", ".so", ".pyd", ".pth", ".dll", ".dylib", ".egg-link", ".zip", ".egg", ".whl"}
)
"""Suffixes an added data file may not have: code the scan cannot read, or that the import system loads on its own."""
CONFIG_NAMES = frozenset(
    {"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg", "pyproject.toml"}
)


def _placed(pure: PurePosixPath, sources: set[str], packages: set[str]) -> bool:
    """In a source folder of the starting tree (not its root), or anywhere under one of its packages (a new
    subpackage `shop/money/`): importable only through the task's own package names, so it shadows nothing."""
    parent = str(pure.parent)
    if parent != "." and parent in sources:
        return True
    return any(str(ancestor) in packages for ancestor in pure.parents if str(ancestor) != ".")


def allowed_addition(path: str, sources: set[str], packages: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """An added file the grader keeps, placed in a source folder or under a package of the starting tree
    (`packages`: folders holding an `__init__.py`), outside test folders and dot-folders: a plain module (not a
    `conftest.py`, not a start-up hook, no `pytest.py` or `__main__.py`; a name like a test's is a module like any
    other), or a data file (a JSON table, a template) that is neither code the scan cannot read nor
    configuration (`NOT_DATA`, `CONFIG_NAMES`). New top-level folders and root modules are not kept: first on
    `sys.path`, they could shadow pytest or the standard library."""
    pure = PurePosixPath(path)
    if not _placed(pure, sources, packages) or pure.name in STARTUP_NAMES or any(p.startswith(".") for p in pure.parts):
        return False
    if TEST_DIRS & set(pure.parts) or pure.name == "conftest.py":
        return False
    if pure.suffix == ".py":
        # A module named like a test (`shop/ab_test.py`, a helper for A/B tests) is kept like any other module: it is
        # scanned whole, and no test it may hold is graded (the graded ids and the canaries are fixed by the task).
        return pure.name not in ("pytest.py", "__main__.py")
    code = {suffix.lower() for suffix in pure.suffixes} & NOT_DATA  # `x.so.1` is a library ctypes loads all the same
    return not code and pure.name not in CONFIG_NAMES


def strays(
    baseline: Mapping[str, str], current: Mapping[str, str], links: Iterable[str], owned: Iterable[str]
) -> list[str]:
    """Paths to remove before the tests run: additions that are not allowed, start-up hooks, `.pth` files, links.

    Every link goes, also one standing where the starting tree has a regular file: `baseline` lists regular files
    only, and a link there is listed as neither added nor changed, so the scan would never read what it points to."""
    owned = set(owned)
    sources = source_dirs(baseline)
    packages = {str(PurePosixPath(p).parent) for p in baseline if PurePosixPath(p).name == "__init__.py"}
    remove = list(links)  # also at an owned path: the owned file is then written as a regular file
    for path in current:
        if path in owned:
            continue
        name = PurePosixPath(path).name
        hook = name in STARTUP_NAMES or name.endswith(".pth")
        if hook or (path not in baseline and not allowed_addition(path, sources, packages)):
            remove.append(path)
    return sorted(set(remove))


def in_the_way(baseline: Iterable[str], listing: Listing, owned: Iterable[str]) -> list[str]:
    """What stands where grading writes a file, to be removed first: every fifo, socket or device; a folder at an
    owned path; and every folder the starting tree does not hold whose name ends in `.py`, where a canary or a
    held-out test module would be written (no module can live in such a folder)."""
    ancestors = {str(parent) for path in baseline for parent in PurePosixPath(path).parents}
    owned = set(owned)
    folders = [d for d in listing.dirs if d in owned or (d.endswith(".py") and d not in ancestors)]
    return sorted({*listing.others, *folders})


def changed_python(baseline: Mapping[str, str], current: Mapping[str, str], kept: Iterable[str]) -> list[str]:
    """The `.py` files among `kept` that are new or differ from the starting tree (whose shas may be prefixes)."""
    return sorted(p for p in kept if p.endswith(".py") and not current.get(p, "").startswith(baseline.get(p, "-")))


def added_lines(before: str | None, after: str) -> list[str]:
    old = set((before or "").splitlines())
    return [line for line in after.splitlines() if line not in old]


def scan(path: str, before: str | None, after: str) -> list[str]:
    """One reason per machinery pattern found in the lines the agent added to `path`."""
    found = []
    lines = added_lines(before, after)
    for reason, pattern in MACHINERY:
        hit = next((line for line in lines if pattern.search(line)), None)
        if hit is not None:
            found.append(f"{path}: {reason}: {hit.strip()[:120]!r}")
    return found
