"""Atomic file writes: what others read (task files, checkpoints, deltas, listings) is never seen half-written.

The data goes to a dot-named temp file in the same folder (readers that skip dot-files never see it), is fsynced,
then renamed over the target; a failure removes the temp file and leaves the target as it was. The file gets the
mode a plain `open(path, "w")` would give it: the target's mode when it exists, else 0666 less the process umask.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return default_mode()


def default_mode() -> int:
    """The mode `open(path, "w")` gives a new file: 0666 less the process umask (libraries that write 0600, such as
    safetensors, are set back to it for files others read)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (renames, new files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
