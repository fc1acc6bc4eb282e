"""The files of a repository, and the scrubbed snapshot an agent starts from.

What is never copied: version-control history (`.git`), bytecode (`__pycache__`, `*.pyc`), type-checker, linter and
test caches (`.mypy_cache`, `.pytest_cache`, `.ruff_cache`, ...), virtual environments and build output (`build/`,
`dist/`, `*.egg-info`). In a git repository the listing is `git ls-files --cached --others --exclude-standard`, so
ignored files stay out too. The snapshot is a fresh git repository with one commit of the post-deletion tree; before
it is packed, every file and every git object in it is searched for the deleted code (`leaks`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

SCRUBBED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
        ".tox", ".nox", ".venv", "venv", ".eggs", "build", "dist", "htmlcov", "node_modules", ".pyre", ".pytype",
    }
)  # fmt: skip
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
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise SnapshotError(f"git {' '.join(args)} failed in {cwd}: {result.stderr.decode(errors='replace').strip()}")
    return result.stdout.decode("utf-8", errors="surrogateescape")


def list_files(repo: Path) -> dict[str, bytes]:
    """Repository-relative path -> bytes of every file worth copying (symlinks and scrubbed paths left out)."""
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
    files: dict[str, bytes] = {}
    for path in paths:
        full = repo / path
        if is_scrubbed(path) or full.is_symlink() or not full.is_file():
            continue
        files[path] = full.read_bytes()
    return files


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


def build_snapshot(files: dict[str, bytes], removed: str) -> str:
    """A fresh single-commit git repository of `files`, checked for `removed`, as base64 of a gzip tarball."""
    with tempfile.TemporaryDirectory(prefix="composer-prime-snapshot-") as scratch:
        root = Path(scratch) / "repo"
        root.mkdir()
        write_tree(root, files)
        _git(["init", "-q"], root)
        _git(["symbolic-ref", "HEAD", "refs/heads/main"], root)
        _git(["add", "-A"], root)
        identity = ["-c", "user.name=composer-prime", "-c", "user.email=composer-prime@localhost"]
        _git([*identity, "commit", "-q", "--no-verify", "-m", "Task snapshot"], root)
        for hook in (root / ".git" / "hooks").glob("*"):
            hook.unlink()
        leaked = leaks(root, removed)
        if leaked:
            raise SnapshotError(f"the deleted code is still present in {', '.join(leaked)}")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for path in sorted(root.rglob("*")):
                tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def unpack_snapshot(snapshot: str, root: Path) -> None:
    """Extract a snapshot into `root` (tests and tools; the environment extracts inside the box with `tar`)."""
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(snapshot)), mode="r:gz") as tar:
        tar.extractall(root, filter="data")
