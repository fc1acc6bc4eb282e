"""The files of a repository, and the scrubbed snapshot an agent starts from.

What is never copied: version-control history (`.git`), bytecode (`__pycache__`, `*.pyc`), type-checker, linter and
test caches (`.mypy_cache`, `.pytest_cache`, `.ruff_cache`, ...), virtual environments and build output (`build/`,
`dist/`, `*.egg-info`). In a git repository the listing is `git ls-files --cached --others --exclude-standard`, so
ignored files stay out too. A repository state is packed once (`pack_tree`, stored beside the tasks file and named by the
state's fingerprint); a task row holds only what differs: the held-out test files and the deletion's changes
(`task_tree`). The box turns that tree into a fresh git repository with one commit. Before a task is kept, every
visible file is searched for the deleted code (`leaked_files`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from composer_prime.mining.deletion import apply_edits
from composer_prime.process.commands import run_checked_host

SCRUBBED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        ".venv",
        "venv",
        ".eggs",
        "build",
        "dist",
        "htmlcov",
        "node_modules",
        ".pyre",
        ".pytype",
    }
)
SCRUBBED_SUFFIXES = (".pyc", ".pyo", ".pyd", ".so", ".egg-info", ".dist-info")
SCRUBBED_NAMES = frozenset({".coverage", ".DS_Store"})
GIT_TIMEOUT_S = 120.0


class SnapshotError(Exception):
    """The snapshot could not be built, or it would leak the deleted code."""


def is_scrubbed(path: str) -> bool:
    """Whether a repository-relative path is left out of every copy the miner makes."""
    parts = PurePosixPath(path).parts
    if any(part in SCRUBBED_DIRS or part.endswith(SCRUBBED_SUFFIXES) for part in parts[:-1]):
        return True
    name = parts[-1]
    return name in SCRUBBED_NAMES or name.endswith(SCRUBBED_SUFFIXES) or name.startswith(".coverage.")


def _git(args: list[str], cwd: Path) -> str:
    return run_checked_host(["git", *args], error=SnapshotError, timeout_s=GIT_TIMEOUT_S, cwd=cwd)


def list_files(repo: Path) -> dict[str, bytes]:
    """Repository-relative path -> bytes of every file worth copying (symlinks and scrubbed paths left out)."""
    return {path: (repo / path).read_bytes() for path in list_paths(repo)}


def list_paths(repo: Path) -> list[str]:
    """Repository-relative paths of every file worth copying (symlinks and scrubbed paths left out), sorted."""
    if (repo / ".git").exists():
        listing = _git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], repo).split("\0")
        paths = sorted({path for path in listing if path})
    else:
        paths = []
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames[:] = [d for d in dirnames if d not in SCRUBBED_DIRS and not d.endswith(SCRUBBED_SUFFIXES)]
            rel = Path(dirpath).relative_to(repo)
            paths += [(rel / name).as_posix() for name in filenames]
        paths.sort()
    return [
        path for path in paths if not (is_scrubbed(path) or (repo / path).is_symlink() or not (repo / path).is_file())
    ]


def fingerprint(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()[:16]


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _normalise(text: str) -> str:
    """Whitespace-insensitive form: stripped non-blank lines, so re-indented copies are found too."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def leaks(root: Path, removed: str) -> list[str]:
    """Paths under `root` (git objects decompressed) whose text contains the deleted code."""
    needle = _normalise(removed)
    if not needle:
        return []
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if ".git/objects/" in path.as_posix() and "/pack/" not in path.as_posix():
            try:
                data = zlib.decompress(data)
            except zlib.error:
                pass
        if needle in _normalise(data.decode("utf-8", errors="replace")):
            found.append(path.relative_to(root).as_posix())
    return found


def leaked_files(files: dict[str, bytes], removed: str) -> list[str]:
    """Paths of `files` whose text contains the deleted code (whitespace-insensitive)."""
    needle = _normalise(removed)
    if not needle:
        return []
    return sorted(p for p, data in files.items() if needle in _normalise(data.decode("utf-8", errors="replace")))


def pack_tree(files: dict[str, bytes]) -> bytes:
    """A gzip tarball of `files` (path -> bytes), byte-identical for the same files: sorted, no times or owners."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped, tarfile.open(fileobj=zipped, mode="w") as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(files[path]), 0o644
            tar.addfile(info, io.BytesIO(files[path]))
    return buffer.getvalue()


def unpack_tree(data: bytes) -> dict[str, bytes]:
    """The files of a `pack_tree` tarball."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[member.name] = handle.read()
    return files


def task_tree(base: dict[str, bytes], held_out: list[str], changes: dict[str, list | None]) -> dict[str, bytes]:
    """The agent's starting files: the repository state without the held-out tests, with the deletion's line edits
    applied (`changes`, as `record.MinedTask` stores them)."""
    tree = {path: data for path, data in base.items() if path not in held_out}
    for path, edits in changes.items():
        if edits is None:
            tree.pop(path, None)
        else:
            tree[path] = apply_edits(
                base[path].decode("utf-8"), [(a, b, list(lines)) for a, b, lines in edits]
            ).encode()
    return tree
