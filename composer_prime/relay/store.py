"""The client's store on disk: built steps (`<store>/steps/step_N/`) and what was recorded when each was built.

Each built step holds `.relay.json`: its checkpoint digest, the `sequence` of the publication it was built from
(`trust.py`) and the blake3 of every file as written, which `verify_files` checks again before the step is handed
to vLLM a second time. A step without a complete record is not a built step (a crash, or an older layout): rebuilt.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import blake3

from composer_prime.atomic import write_atomic
from composer_prime.relay import checkpoint

_STEP_DIR = re.compile(r"^step_(\d+)$")
META = ".relay.json"


def read_meta(folder: Path) -> dict | None:
    """The record of a built step (digest, sequence, files); None if the folder is not a complete built step."""
    try:
        meta = json.loads((folder / META).read_text())
        if (folder / checkpoint.MARKER).exists() and isinstance(meta["digest"], str) and meta["sequence"] >= 1:
            return meta
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def write_meta(folder: Path, meta: dict) -> None:
    write_atomic(folder / META, json.dumps(meta).encode())


def built_steps(steps_dir: Path) -> dict[int, str]:
    """step -> checkpoint digest of every complete built step."""
    steps = {}
    for entry in steps_dir.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and (meta := read_meta(entry)) is not None:
            steps[int(match[1])] = meta["digest"]
    return steps


def verify_files(folder: Path) -> bool:
    """Whether every file of a built step still has the blake3 digest recorded when it was built."""
    meta = read_meta(folder)
    try:
        return meta is not None and all(file_blake3(folder / name) == d for name, d in meta["files"].items())
    except (OSError, KeyError, AttributeError):
        return False


def file_blake3(path: Path) -> str:
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    hasher.update_mmap(path)
    return hasher.hexdigest()
