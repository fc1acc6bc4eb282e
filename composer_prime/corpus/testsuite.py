"""A package's tests, looked for before any image is built: where they are, and what they import.

- `test_files`: the fetched tree's test files, by the miner's rule (`mining.features.is_test_file`: pytest's and
  unittest's names, `tests/` folders).
- An sdist that ships none falls back to the project's repository at the release's tag when its metadata names one
  (`repository_urls`: `Project-URL` entries labelled like a source repository, then `Home-page`, hosts git serves;
  `release_tree` tries the tags `v<version>`, `<version>`, `<name>-<version>`, `release-<version>`).
- `missing_imports`: the top-level modules the test files import that are neither the standard library, nor the
  package's own, nor provided by a declared requirement; each mapped to the distribution that provides it
  (`DISTRIBUTIONS` for the common names that differ, else the module's own name), so the image gets what the
  tests need when the metadata does not say (iso8601 2.1.0's tests import `hypothesis` and `pytz`).
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from composer_prime.mining.features import is_test_file

SOURCE_LABELS = ("source", "source code", "repository", "code", "github", "gitlab", "git", "homepage", "home")
"""`Project-URL` labels (lowercased) that name the project's repository, in the order they are tried."""
GIT_URL = re.compile(
    r"^(https?://(www\.)?(github\.com|gitlab\.com|codeberg\.org|bitbucket\.org)/[^/\s]+/[^/\s#?]+"
    r"|https?://(localhost|127\.0\.0\.1)(:[0-9]+)?/\S+|file://\S+|/\S+)$"
)
"""Repository URLs tried: the public git hosts' project pages, a mirror on this machine, and local paths."""
TAGS = ("v{version}", "{version}", "{name}-{version}", "release-{version}")

DISTRIBUTIONS = {
    "yaml": "PyYAML",
    "dateutil": "python-dateutil",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "PIL": "Pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "google": "protobuf",
    "jwt": "PyJWT",
    "magic": "python-magic",
    "serial": "pyserial",
    "usb": "pyusb",
    "dotenv": "python-dotenv",
    "pkg_resources": "setuptools",
    "OpenSSL": "pyOpenSSL",
    "Crypto": "pycryptodome",
    "jose": "python-jose",
    "multipart": "python-multipart",
    "typing_extensions": "typing-extensions",
    "zmq": "pyzmq",
}
"""Import name -> PyPI distribution, for the common names where they differ (any other is its own name)."""
PROVIDED = frozenset({"__future__", "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging"})
"""What every image has: pytest and its own dependencies (`images.ALWAYS`)."""


def test_files(tree: Path) -> list[str]:
    """The tree's test files (relative paths), by the miner's rule."""
    found = []
    for path in sorted(tree.rglob("*.py")):
        relative = path.relative_to(tree).as_posix()
        if not any(part.startswith(".") for part in relative.split("/")) and is_test_file(relative):
            found.append(relative)
    return found


def repository_urls(tree: Path) -> list[str]:
    """The repository URLs an sdist's `PKG-INFO` names (`Project-URL` by `SOURCE_LABELS`, then `Home-page`)."""
    pkg_info = tree / "PKG-INFO"
    if not pkg_info.is_file():
        return []
    message = HeaderParser().parsestr(pkg_info.read_text("utf-8", "replace"))
    labelled = []
    for entry in message.get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        labelled.append((label.strip().lower(), url.strip().rstrip("/").removesuffix(".git")))
    ordered = [url for wanted in SOURCE_LABELS for label, url in labelled if label == wanted]
    ordered += [str(message.get("Home-page") or "").strip().rstrip("/")]
    return [url for url in dict.fromkeys(ordered) if url and GIT_URL.match(url)]


def release_tree(tree: Path, name: str, version: str, into: Path, fetch_git, log) -> tuple[Path | None, list[str]]:  # type: ignore[no-untyped-def]
    """The project's repository at the release's tag, fetched into `into` with `fetch_git(url, ref, into, folder)`
    (the folder named as the sdist's), when it holds test files; else None. Also what was tried."""
    tried, unreachable = [], []
    for url in repository_urls(tree):
        for pattern in TAGS:
            ref = pattern.format(name=name, version=version)
            tried.append(f"{url}@{ref}")
            shutil.rmtree(into, ignore_errors=True)
            try:
                fetched = fetch_git(url, ref, into, tree.name)
            except Exception as exc:  # a tag the repository lacks, a host that is down: the next one
                why = str(exc).strip().splitlines()[-1][:160] if str(exc).strip() else repr(exc)
                log(f"fetch: {url} at {ref}: {why}")
                if any(sign in str(exc) for sign in UNREACHABLE):
                    unreachable.append(f"{url}: {why}")
                    break  # the host, not the tag: the other spellings would fail the same way
                continue
            if test_files(fetched):
                return fetched, tried
            log(f"fetch: {url} at {ref} holds no test files either")
            break  # the tag exists: another spelling of it would be the same release
    if unreachable:
        raise RepositoryUnreachable(
            "the sdist ships no test files and its repository could not be reached ("
            + "; ".join(unreachable[:2])
            + "): nothing is recorded, so a re-run tries again once the host is reachable"
        )
    return None, tried


class RepositoryUnreachable(Exception):
    """The repository an sdist's metadata names could not be reached (the network, not the release): a transient
    failure, which leaves the package incomplete so that a re-run tries again."""


UNREACHABLE = (
    "Could not resolve host",
    "Connection refused",
    "Connection timed out",
    "Network is unreachable",
    "Failed to connect",
    "Operation timed out",
    "unable to access",
)
"""git's words for a host it could not reach (as opposed to a ref the repository lacks)."""


GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
"""Handlers under which an import is optional."""


def _guarded(handler: ast.ExceptHandler) -> bool:
    """An `except` that catches a failed import (`ImportError`, `ModuleNotFoundError`, `Exception`, bare)."""
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(n is None or getattr(n, "id", None) in GUARDS for n in names)


def _top_imports(text: str) -> set[str]:
    """Top-level module names imported, but for imports guarded by a `try` that catches their failure (optional
    dependencies, Python 2 fallbacks)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and any(_guarded(h) for h in node.handlers):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def missing_imports(tree: Path, requirements: list[str]) -> list[str]:
    """Distributions the test files import that no requirement names (sorted; see the module docstring)."""
    files = test_files(tree)
    imported: set[str] = set()
    for path in files:
        imported |= _top_imports((tree / path).read_text("utf-8", "replace"))
    own = {
        path.split("/")[0].removesuffix(".py") for path in (p.relative_to(tree).as_posix() for p in tree.rglob("*.py"))
    }
    own |= {p.name for p in tree.glob("src/*") if p.is_dir()} | {p.stem for p in tree.glob("src/*.py")}
    declared = set()
    for text in requirements:
        try:
            declared.add(canonicalize_name(Requirement(text).name))
        except InvalidRequirement:
            continue
    wanted = []
    for module in sorted(imported - own - set(sys.stdlib_module_names) - PROVIDED):
        distribution = DISTRIBUTIONS.get(module, module)
        if not {canonicalize_name(distribution), canonicalize_name(module)} & declared:
            wanted.append(distribution)
    return sorted(dict.fromkeys(wanted))
