"""The memory of session ids already accepted, bounded by the acceptance window (docs/realtime.md, "Bounds").

A retried upload repeats a session id at a new place in the spool, so catching it needs the ids themselves, not
spool positions. But the reader refuses every session that ended before the cursor's `horizon` (`too_old`; the
horizon is `spool.max_session_age_s` behind the trainer's clock and never moves back), so only ids of sessions that
ended at or after it can come back and be accepted twice: the memory keeps exactly those, and forgets the rest.

On disk it is one append-only file per UTC day of the sessions' `ended_at` (`<root>/<YYYY-MM-DD>.ids`, one
JSON-quoted id a line). The cursor records how many bytes of each file it covers (`Cursor.ids`), written atomically
with it; bytes past that length are what a crash left between an append and the cursor's commit, and are ignored on
load and overwritten by the next append. So a read costs what its new ids cost (an append to a day's file), never
the size of the history, and a day's file is deleted whole once the horizon has passed its end (after the cursor
that no longer names it has committed: `sweep`).

In memory a day is `SHARDS` dicts of ids (keys, values None), an id in the one its hash picks, and a file is
loaded `LOAD_CHUNK` bytes at a time: the source keeps this memory in a thread beside PRIME-RL's event loop, and the
interpreter lock passes between threads only between bytecodes, so one C call that builds or resizes a
million-entry table (tens of milliseconds) would stall the loop for all of it; a shard of a million-id day holds
about 4,000. Dicts rather than sets because the garbage collector never tracks a dict of strings, while it walks
every entry of every set at each collection that covers it (a million ids: tens of milliseconds, again).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

DAY_S = 86400.0
SUFFIX = ".ids"
SHARDS = 256
"""Tables per day (a power of two): an id lives in `shards[hash(id) & MASK]`."""
MASK = SHARDS - 1
LOAD_CHUNK = 64 << 10
"""Bytes of a day's file split and parsed per call when loading (about 5,000 ids)."""


def shard() -> list[dict[str, None]]:
    return [{} for _ in range(SHARDS)]


def day_of(ended_at: float) -> str:
    return datetime.fromtimestamp(ended_at, UTC).strftime("%Y-%m-%d")


def day_end(name: str) -> float:
    """Unix seconds at the end of the UTC day a file holds."""
    start = datetime.strptime(name, "%Y-%m-%d").replace(tzinfo=UTC)
    return (start + timedelta(days=1)).timestamp()


class SeenIds:
    """Ids of the accepted sessions that ended at or after the horizon, read from `root` up to `committed` (day ->
    bytes, the cursor's `ids`). `add` buffers; `flush` appends the buffer and gives the lengths the next cursor
    commits; `sweep`, after that commit, deletes the days it no longer names."""

    def __init__(self, root: Path, committed: dict[str, int]):
        self.root = root
        self.committed = dict(committed)
        self.days: dict[str, list[dict[str, None]]] = {day: self._read(day, n) for day, n in sorted(committed.items())}
        self.new: dict[str, list[str]] = {}

    def _read(self, day: str, length: int) -> list[dict[str, None]]:
        shards = shard()
        path = self.root / f"{day}{SUFFIX}"
        try:
            with path.open("rb") as f:
                data = f.read(length)
        except FileNotFoundError:
            data = b""
        if len(data) != length:
            raise RuntimeError(
                f"session-id memory {str(path)!r} holds {len(data)} bytes but the cursor covers "
                f"{length}: it was truncated or removed by hand; restore it from a backup, or move "
                "the state aside to start over (the spool would be read again)"
            )
        start = 0
        while start < len(data):  # whole lines, about LOAD_CHUNK bytes a call
            end = data.find(b"\n", start + LOAD_CHUNK) + 1 or len(data)
            for sid in json.loads(b"[" + data[start:end].rstrip(b"\n").replace(b"\n", b",") + b"]"):
                shards[hash(sid) & MASK][sid] = None
            start = end
        return shards

    def __contains__(self, sid: str) -> bool:
        key = hash(sid) & MASK
        return any(sid in shards[key] for shards in self.days.values())

    def __len__(self) -> int:
        return sum(len(ids) for shards in self.days.values() for ids in shards)

    def forget(self, horizon: float) -> None:
        """Stop remembering the days wholly before `horizon` (their sessions are refused as too old from now on);
        their files go at the `sweep` after the next commit."""
        for day in [d for d in self.days if day_end(d) <= horizon]:
            del self.days[day]

    def add(self, sid: str, ended_at: float) -> None:
        day = day_of(ended_at)
        shards = self.days.get(day)
        if shards is None:
            shards = self.days[day] = shard()
        shards[hash(sid) & MASK][sid] = None
        self.new.setdefault(day, []).append(sid)

    def flush(self, horizon: float) -> dict[str, int]:
        """Append the ids added since the last flush to their days' files (each cut back to its committed length
        first, fsynced) and return the lengths the next cursor covers, without the days wholly before `horizon`."""
        self.root.mkdir(parents=True, exist_ok=True)
        lengths = dict(self.committed)
        for day, sids in sorted(self.new.items()):
            path = self.root / f"{day}{SUFFIX}"
            start = lengths.get(day, 0)
            with path.open("r+b" if path.exists() else "wb") as f:
                f.seek(start)
                f.truncate()
                f.write("".join(json.dumps(s) + "\n" for s in sids).encode())
                f.flush()
                os.fsync(f.fileno())
                lengths[day] = f.tell()
        self.new = {}
        self.committed = {day: n for day, n in lengths.items() if day_end(day) > horizon}
        return dict(self.committed)

    def sweep(self) -> None:
        """Delete day files the committed cursor no longer names (passed by the horizon, or written by a read that
        crashed before its cursor committed), and forget their ids."""
        for day in [d for d in self.days if d not in self.committed]:
            del self.days[day]
        sweep(self.root, self.committed)


def sweep(root: Path, committed: dict[str, int]) -> None:
    """Delete the day files under `root` that the committed cursor's `ids` does not name."""
    if root.is_dir():
        for path in root.glob(f"*{SUFFIX}"):
            if path.stem not in committed:
                path.unlink(missing_ok=True)
