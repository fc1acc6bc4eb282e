"""Work-directory path normalisation (the token estimate and middle truncation are in `composer_prime.text`)."""

from __future__ import annotations

import posixpath


class PathEscape(ValueError):
    """A tool path that leaves the work directory."""


def normalize_path(path: str, roots: tuple[str, ...] = ()) -> str:
    """`path` as a normalised path relative to the work directory, or PathEscape.

    Relative paths are taken from the work directory. An absolute path is accepted only when it lies under one of
    `roots` (the work directory's absolute spellings); `..` may not climb out. Symlinks are checked in the runtime,
    where they live (see workspace.py)."""
    if "\x00" in path:
        raise PathEscape(f"path {path!r} contains a NUL byte")
    raw = path.strip() or "."
    if raw.startswith("/"):
        clean = posixpath.normpath(raw)
        for root in roots:
            root = posixpath.normpath(root)
            if clean == root:
                return "."
            if clean.startswith(root.rstrip("/") + "/"):
                return posixpath.relpath(clean, root)
        raise PathEscape(f"path {path!r} is outside the work directory; use a path relative to it (e.g. 'src/main.py')")
    clean = posixpath.normpath(raw)
    if clean == ".." or clean.startswith("../"):
        raise PathEscape(f"path {path!r} leaves the work directory; paths must stay inside it")
    return clean
