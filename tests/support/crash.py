"""A crash between any two durable writes, injected at the operating system's boundary.

Every durable write of the realtime loop ends in a rename (`composer_prime.atomic.write_atomic`, checkpoint dirs), and
CPython raises the audit event `os.rename` before each `os.rename` / `os.replace`. `crash_after(root, k)` lets the
first `k` renames into `root` happen and makes the next one raise `Crash` (a `BaseException`, so no `except
Exception` in the code under test swallows it): the files under `root` are then exactly those of a process killed
between its k-th and (k+1)-th write. The code under test is not touched; the hook sees only the rename's arguments.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Crash(BaseException):
    """The injected crash."""


_armed: dict = {}


def _hook(event: str, args: tuple) -> None:
    if event != "os.rename" or not _armed:
        return
    target = os.fsdecode(args[1]) if isinstance(args[1], str | bytes | os.PathLike) else ""
    if not target.startswith(_armed["root"]):
        return
    if _armed["left"] == 0:
        _armed.clear()
        raise Crash(f"crash before writing {target}")
    _armed["left"] -= 1
    _armed["count"]["done"] += 1


sys.addaudithook(_hook)  # audit hooks cannot be removed; this one does nothing unless armed


@contextmanager
def crash_after(root: Path, writes: int | None) -> Iterator[dict]:
    """Within the block, the rename after the first `writes` renames under `root` raises `Crash` (None: no crash).
    Yields a dict whose `done` counts the renames that happened."""
    count = {"done": 0}
    _armed.clear()
    _armed.update(root=str(root), left=-1 if writes is None else writes, count=count)
    try:
        yield count
    finally:
        _armed.clear()
