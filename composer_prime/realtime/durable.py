"""The one way the realtime loop writes and reads its durable files (state, batches, the journal, bundles, reports).

A durable record is a pydantic model written as JSON by alias and read back with the same model: the session-log
records inside a cursor (pending sessions, early signals) name their `schema` field by its alias, exactly as a spool
line does, so what a cursor holds reads back with the strict (`extra = "forbid"`) record models that read the spool.
Writing by field name instead (`schema_`) gives a file those models refuse, which is why nothing else in the package
calls `model_dump_json` for a file (tests/unit/realtime/test_realtime_durable.py round-trips every durable file over
random spools and crash points, and checks that this module is the only writer).

Writes are atomic (`composer_prime.atomic.write_atomic`: temp name, fsync, rename), so a crash leaves the previous
complete file or the new one. A file that exists but does not read back stops the run with `DurableError`, naming the
file, the field and the fix, never a traceback.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from composer_prime.atomic import write_atomic

M = TypeVar("M", bound=BaseModel)


class DurableError(RuntimeError):
    """A durable file does not read back or cannot be written; the message names the file and the fix."""


def dumps(value: BaseModel | Any, indent: int | None = None) -> str:
    """`value` (a pydantic model, or plain JSON data) as the JSON text a durable file holds."""
    if isinstance(value, BaseModel):
        return value.model_dump_json(by_alias=True, indent=indent)
    return json.dumps(value, indent=indent)


def save(path: Path, value: BaseModel | Any, indent: int | None = None) -> None:
    """Write `value` to `path` atomically. A full disk or a read-only folder raises `DurableError` (the previous
    file, if any, is left as it was)."""
    try:
        write_atomic(path, dumps(value, indent))
    except OSError as err:
        why = "the disk is full" if err.errno == errno.ENOSPC else err.strerror or str(err)
        raise DurableError(
            f"cannot write {str(path)!r}: {why}; free space or fix the folder's permissions and "
            "rerun: the run resumes from the last file written whole"
        ) from None


def load(model: type[M], path: Path) -> M:
    """The `model` in the durable file at `path`; `DurableError` when it is not one."""
    try:
        text = path.read_text()
    except OSError as err:
        raise DurableError(f"cannot read {str(path)!r}: {err.strerror or err}") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the file)"
        raise DurableError(
            f"{str(path)!r} is not a {model.__name__}: {where}: {first['msg']}; it was written by "
            "another composer-prime version or edited by hand: restore it from a backup, or move the "
            "state aside to start over"
        ) from None


def load_json(path: Path) -> Any:
    """Plain JSON data (a report, train figures) from a durable file."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DurableError(f"{str(path)!r} does not read back as JSON ({err}); move it aside and rerun") from None
