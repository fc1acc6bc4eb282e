"""Pure text helpers: middle truncation, token estimates, and work-directory path normalisation."""

from __future__ import annotations

import json
import posixpath
from typing import Any

CHARS_PER_TOKEN = 4
"""Rough characters per token, used only where a server reports no `usage`."""


def estimate_tokens(value: str | list[dict[str, Any]] | dict[str, Any]) -> int:
    """Token estimate at four characters per token; messages are measured as their JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and tail of `text` within `max_chars`, saying how much was cut from the middle.

    The middle goes because the head of a command's output says what ran and the tail says how it ended."""
    if len(text) <= max_chars:
        return text
    marker = "\n[... {n} characters truncated ...]\n"
    budget = max(0, max_chars - len(marker.format(n=len(text))))
    head = text[: (budget + 1) // 2]
    tail = text[len(text) - budget // 2 :] if budget // 2 else ""
    return head + marker.format(n=len(text) - len(head) - len(tail)) + tail


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
