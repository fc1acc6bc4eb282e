"""The spool reader: what is new in the session-log files since a durable cursor, sorted into sessions ready to
train, sessions still waiting for their signals, and counted rejects.

The spool is a folder of append-only JSONL files (`*.jsonl`, read in name order; a product rotates by starting a
new file). The cursor is the byte offset up to which each file has been consumed. Only whole lines are consumed: a
line still being written (no newline yet) is read on a later pass. A file shorter than its offset was truncated or
replaced, which would silently lose or repeat records, so the reader stops with an error naming it.

`Cursor` is plain data, bounded by the windows it waits out, never by the history: the offsets of the files still in
the spool; the horizon before which a session is refused (`too_old`), and with it how much of the session-id memory
(`seen.SeenIds`, one append-only file per day beside the cursor) it covers, so a duplicate is caught across restarts
while the memory forgets sessions the horizon has passed; where each session waiting out its signal window is in the
spool (file, byte range, end time: the session itself is read again from the spool when its window closes, so no copy
of its text or tokens sits in the state); and signals whose session has not been read yet (typed values, no free
text). A session accepted and no longer pending has been handed out to train, so a signal for it is late. `advance`
is one step from one cursor to the next; the cycle runner writes the new cursor in the same atomic file as the batch
it trains on (`cycle.py`), so after a crash a cycle either re-reads nothing or trains the same batch again from the
last checkpoint: nothing is lost and nothing is trained twice.

A read that stops short of the spool's end (`max_lines_per_cycle`) releases the sessions, and expires the signals,
that a reader keeping pace with the spool would have by then: it reads the spool's clock as the `frontier` (each file
is appended in time order, so no unread line is older than the last record read from its file, or than its first
record), so the cursor holds a signal window's worth of sessions, not the whole backlog. A signal written after
that frontier passed its session's window counts `late_signal`, as for a reader that kept pace.

With `retire_after_s` set, a spool file the cursor has read to its end, that is not the newest, holds no pending
session and has not been written for that long, leaves the cursor's offsets for its `retired` list; the next read,
once that cursor has committed, moves the file to `archive_dir` or deletes it. A crash in between leaves a file the
cursor names as retired, which the next read takes out before it reads anything.

Every line goes exactly one way: accepted (a session, or a signal joined to one), or rejected with a reason in
`Advance.rejected` (where it is, its length and SHA-256, and the reason's detail with secrets redacted; never the
line itself, which may hold a secret), and counted in `Advance.counts`:
`malformed` (a torn line is counted here and the record appended after it read on its own), `missing_logprobs`,
`sampling_mismatch`, `duplicate_session`, `duplicate_signal`, `clock_skew`, `too_old`, `late_signal` (its session already trained),
`orphan_signal` (no session within `max_pending_s`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.realtime.ingest.seen import SeenIds
from composer_prime.realtime.monitors.pii import redact
from composer_prime.realtime.records import (
    MalformedRecord,
    MissingLogprobs,
    Sampling,
    SessionRecord,
    SignalRecord,
    check_logprobs,
    parse_record,
)


class SpoolConfig(BaseModel):
    """Where the session logs are and how long to wait for their signals."""

    model_config = ConfigDict(extra="forbid")

    dir: Path = Path("spool")
    """The folder the serving product appends session-log files (`*.jsonl`) to."""
    signal_window_s: float = Field(600.0, ge=0)
    """A session trains once this many seconds have passed since it ended, so that late signals (edit persistence
    checked after N minutes) are joined first."""
    max_clock_skew_s: float = Field(300.0, ge=0)
    """Product timestamps may run this far ahead of the trainer's clock; a session ending, or a signal observed,
    further in the future (or a signal observed this long before its session ended) is rejected as `clock_skew`."""
    max_pending_s: float = Field(86400.0, gt=0)
    """A signal whose session has not appeared this long after it was observed is dropped as `orphan_signal`."""
    max_session_age_s: float = Field(30 * 86400.0, gt=0)
    """A session that ended more than this long before the trainer's clock (a product clock at 1970, a replayed
    archive) is rejected as `too_old`."""
    sampling: Sampling = Sampling(temperature=1.0)
    """The sampling the trainer assumes (PRIME-RL: the source's `sampling.temperature`, full vocabulary). A session
    sampled at another temperature, or with top-p or top-k truncation, is refused as `sampling_mismatch`: its
    serving logprobs are of a distribution the loss's importance ratio and trust region do not compare against."""
    max_lines_per_cycle: int = Field(1_000_000, ge=1)
    """At most this many new lines are read per cycle (the rest wait for the next). While a read stops short of the
    end of the spool, no session is released and no signal expires: their signals may be in the lines not read yet."""
    retire_after_s: float | None = Field(None, ge=0)
    """A spool file read to its end, not the newest, holding no session that still waits for its signals, and not
    written for this many seconds is taken out of the spool by the read after the one that found it so (moved to
    `archive_dir`, or deleted), and forgotten by the cursor. None: spool files stay (the product prunes them, never
    one the cursor has not passed)."""
    archive_dir: Path | None = None
    """Where retired spool files go (a folder outside `dir`; created when missing). None: they are deleted."""

    @model_validator(mode="after")
    def _check_retention(self) -> SpoolConfig:
        if self.archive_dir is not None and self.retire_after_s is None:
            raise ValueError(
                f"spool.archive_dir = '{self.archive_dir}' but spool.retire_after_s is unset, so no "
                "file is ever retired; set retire_after_s (seconds a consumed file waits) or drop "
                "archive_dir"
            )
        if self.archive_dir is not None and self.archive_dir.resolve() == self.dir.resolve():
            raise ValueError(
                f"spool.archive_dir = '{self.archive_dir}' is the spool dir itself: retired files "
                "would be read again; give a folder outside spool.dir"
            )
        return self


class Pending(BaseModel):
    """Where a session waiting out its signal window is in the spool."""

    model_config = ConfigDict(extra="forbid")

    file: str
    """The spool file's name."""
    start: int = Field(ge=0)
    """Byte offset of its line."""
    end: int = Field(ge=0)
    """Byte offset past its line."""
    ended_at: float
    """The session's `ended_at`."""


class Cursor(BaseModel):
    """The durable reading position and join state."""

    model_config = ConfigDict(extra="forbid")

    offsets: dict[str, int] = Field(default_factory=dict)
    """File name -> bytes consumed, for the files still in the spool."""
    retired: dict[str, int] = Field(default_factory=dict)
    """Spool files read to their end and retired (name -> size), taken out of the spool by the next read."""
    horizon: float = 0.0
    """Sessions that ended before this (Unix seconds) are refused as `too_old`; it follows the trainer's clock
    `spool.max_session_age_s` behind and never moves back."""
    ids: dict[str, int] = Field(default_factory=dict)
    """The session-id memory this cursor covers (`seen.SeenIds`): UTC day -> bytes of its file. It holds every
    session accepted that ended at or after `horizon`."""
    pending: dict[str, Pending] = Field(default_factory=dict)
    """Sessions read but still inside their signal window, by where they are in the spool."""
    signals: dict[str, list[SignalRecord]] = Field(default_factory=dict)
    """Signals by session id, for pending sessions and for sessions not read yet."""


@dataclass
class Ready:
    """A session out of its signal window, with every signal joined to it."""

    session: SessionRecord
    signals: list[SignalRecord]


@dataclass
class Advance:
    """One read's outcome. The sessions it released (`due`: id, place, joined signals) are read again from the spool
    when asked for: all at once (`ready`), or a few at a time (`ready_slices`) so a large release never holds every
    session in memory together."""

    cursor: Cursor
    spool: Path
    due: list[tuple[str, Pending, list[SignalRecord]]] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    rejected: list[dict] = field(default_factory=list)

    @functools.cached_property
    def ready(self) -> list[Ready]:
        return [r for chunk in self.ready_slices(len(self.due) or 1) for r in chunk]

    def ready_slices(self, size: int) -> Iterator[list[Ready]]:
        for i in range(0, len(self.due), size):
            yield [
                Ready(read_pending(self.spool, sid, where), signals) for sid, where, signals in self.due[i : i + size]
            ]


class SpoolError(RuntimeError):
    """The spool cannot be read safely (a file shrank or vanished); the message names the file and the fix."""


READ_CHUNK = 1 << 20
"""Bytes read from a spool file at a time: a backlog is parsed as it is read, never held whole."""


class NewLines:
    """(file, start, end, line) of each complete new line after `offsets`, in file-name then byte order; after
    iterating, `cut_short` says whether `limit` stopped it while more whole lines were waiting."""

    def __init__(self, spool: Path, offsets: dict[str, int], limit: int):
        if not spool.is_dir():
            raise SpoolError(
                f"spool dir {str(spool)!r} does not exist; create it or point spool.dir at the folder "
                "the serving product writes session logs to"
            )
        try:
            names = sorted(n for n in os.listdir(spool) if n.endswith(".jsonl") and not n.startswith("."))
        except OSError as err:
            raise SpoolError(
                f"spool dir {str(spool)!r} cannot be listed ({err.strerror}); give this user read and "
                "execute permission on it"
            ) from None
        missing = sorted(set(offsets) - set(names))
        if missing:
            raise SpoolError(
                f"spool file {missing[0]!r} was read up to byte {offsets[missing[0]]} and is gone; "
                "spool files are append-only: let spool.retire_after_s retire them, or archive them "
                "only after the cursor has moved past them and keep their names out of the spool dir"
            )
        self.spool, self.offsets, self.limit = spool, offsets, limit
        self.names = names
        self.cut_short = False

    def __iter__(self):
        found = 0
        for name in self.names:
            start = self.offsets.get(name, 0)
            path = self.spool / name
            try:
                size = path.stat().st_size
                if size < start:
                    raise SpoolError(
                        f"spool file {name!r} is {size} bytes but {start} were already read: it was "
                        "truncated or replaced; spool files are append-only (start a new file to "
                        "rotate)"
                    )
                if size == start:
                    continue
                with path.open("rb") as f:
                    f.seek(start)
                    pos, carry = start, b""
                    while pos + len(carry) < size:
                        data = carry + f.read(min(READ_CHUNK, size - pos - len(carry)))
                        end = data.rfind(b"\n") + 1
                        carry = data[end:]
                        for raw in data[:end].splitlines(keepends=True):
                            if found >= self.limit:
                                self.cut_short = True
                                return
                            found += 1
                            yield name, pos, pos + len(raw), raw.rstrip(b"\r\n")
                            pos += len(raw)
            except OSError as err:
                raise SpoolError(
                    f"spool file {name!r} cannot be read ({err.strerror}); give this user read permission on it"
                ) from None


RECORD_START = re.compile(rb'\{\s*"(?:schema|version|kind|session_id)"\s*:')
"""Where a record may begin inside a line (a torn line's tail)."""


def split_torn(line: bytes) -> tuple[bytes, bytes] | None:
    """A line that does not parse may be a torn line (a writer stopped mid-record) with the next record appended after
    it: (the torn part, the record) when a JSON object that ends the line starts inside it, else None."""
    for match in RECORD_START.finditer(line, 1):
        try:
            json.loads(line[match.start() :])
        except ValueError:
            continue
        return line[: match.start()], line[match.start() :]
    return None


def read_pending(spool: Path, sid: str, where: Pending) -> SessionRecord:
    """The pending session `sid` read again from its line in the spool."""
    path = spool / where.file
    try:
        with path.open("rb") as f:
            f.seek(where.start)
            line = f.read(where.end - where.start)
        record = parse_record(line)
    except (OSError, MalformedRecord) as err:
        raise SpoolError(
            f"session {sid!r} waits for its signals at {where.file!r} bytes {where.start}..{where.end}, "
            f"which no longer reads back ({err}); spool files are append-only and must stay until "
            "the cursor's pending sessions have trained"
        ) from None
    if not isinstance(record, SessionRecord) or record.session_id != sid:
        raise SpoolError(
            f"{where.file!r} bytes {where.start}..{where.end} no longer hold session {sid!r}: the file "
            "was rewritten; spool files are append-only"
        )
    return record


def take_out(config: SpoolConfig, name: str, size: int) -> None:
    """Move the retired spool file `name` to `archive_dir` (or delete it), when it is still the file the cursor
    retired (its size); a file of another size under that name is new and is read."""
    path = config.dir / name
    try:
        if path.stat().st_size != size:
            return
        if config.archive_dir is None:
            path.unlink()
            return
        config.archive_dir.mkdir(parents=True, exist_ok=True)
        shutil.move(path, config.archive_dir / name)
    except FileNotFoundError:
        return
    except OSError as err:
        where = f"to {str(config.archive_dir)!r}" if config.archive_dir is not None else "(deleting it)"
        raise SpoolError(
            f"spool file {name!r} was read to its end and retired, but cannot be taken out of the spool "
            f"{where}: {err.strerror or err}; give this user write permission on the spool dir (and "
            "spool.archive_dir), or unset spool.retire_after_s"
        ) from None


def retire(cursor: Cursor, config: SpoolConfig, now: float) -> None:
    """Move the files `retire_after_s` lets go from `cursor.offsets` to `cursor.retired` (module docstring)."""
    if config.retire_after_s is None or len(cursor.offsets) < 2:
        return
    held = {p.file for p in cursor.pending.values()}
    newest = max(cursor.offsets)
    for name, offset in sorted(cursor.offsets.items()):
        if name == newest or name in held:
            continue
        try:
            st = (config.dir / name).stat()
        except OSError:
            continue
        if st.st_size == offset and st.st_mtime <= now - config.retire_after_s:
            del cursor.offsets[name]
            cursor.retired[name] = offset


def advance(cursor: Cursor, config: SpoolConfig, now: float, seen: SeenIds) -> Advance:
    """Read what is new after the committed `cursor`; return the next cursor, the sessions ready at `now`, counts and
    rejects. `seen` is the session-id memory `cursor.ids` covers: the ids accepted are appended to it, and the next
    cursor covers them (commit it, then `seen.sweep()`)."""
    nxt = cursor.model_copy(
        update={
            "offsets": dict(cursor.offsets),
            "retired": dict(cursor.retired),
            "ids": dict(cursor.ids),
            "pending": dict(cursor.pending),
            "signals": {sid: list(held) for sid, held in cursor.signals.items()},
        }
    )
    out = Advance(cursor=nxt, spool=config.dir)
    for name, size in nxt.retired.items():  # retired by a committed cursor: leave the spool now
        take_out(config, name, size)
    nxt.retired = {}
    nxt.horizon = max(nxt.horizon, now - config.max_session_age_s)
    seen.forget(nxt.horizon)

    def reject(reason: str, name: str, start: int, line: bytes, detail: str) -> None:
        out.counts[reason] += 1
        out.rejected.append(
            {
                "reason": reason,
                "file": name,
                "offset": start,
                "length": len(line),
                "sha256": hashlib.sha256(line).hexdigest(),
                "detail": redact(detail),
            }
        )

    lines = NewLines(config.dir, nxt.offsets, config.max_lines_per_cycle)
    latest: dict[str, float] = {}  # spool file -> the time of the last record read from it
    for name, start, end, line in lines:
        nxt.offsets[name] = end
        if not line.strip():
            continue
        try:
            record = parse_record(line)
        except MalformedRecord as err:
            torn = split_torn(line)
            if torn is None:
                reject("malformed", name, start, line, str(err))
                continue
            reject(
                "malformed",
                name,
                start,
                torn[0],
                "a torn line: the writer stopped mid-record and the next record "
                "was appended after it (read on its own)",
            )
            start += len(torn[0])
            line = torn[1]
            try:
                record = parse_record(line)
            except MalformedRecord as err:
                reject("malformed", name, start, line, str(err))
                continue
        latest[name] = record.ended_at if isinstance(record, SessionRecord) else record.at
        if isinstance(record, SessionRecord):
            if record.session_id in seen:
                reject("duplicate_session", name, start, line, f"session_id {record.session_id!r} was read before")
                continue
            if record.ended_at < nxt.horizon:
                reject(
                    "too_old",
                    name,
                    start,
                    line,
                    f"ended_at = {record.ended_at} is {now - record.ended_at:.0f}s "
                    f"before this clock (spool.max_session_age_s = {config.max_session_age_s}); check the "
                    "product's clock",
                )
                continue
            if record.ended_at > now + config.max_clock_skew_s:
                reject(
                    "clock_skew",
                    name,
                    start,
                    line,
                    f"ended_at = {record.ended_at} is "
                    f"{record.ended_at - now:.0f}s ahead of this clock (max_clock_skew_s = {config.max_clock_skew_s})",
                )
                continue
            try:
                check_logprobs(record)
            except MissingLogprobs as err:
                reject("missing_logprobs", name, start, line, str(err))
                continue
            if record.sampling != config.sampling:
                got, want = record.sampling.model_dump(), config.sampling.model_dump()
                diff = ", ".join(f"{k} = {got[k]} (the trainer assumes {want[k]})" for k in want if got[k] != want[k])
                reject(
                    "sampling_mismatch",
                    name,
                    start,
                    line,
                    f"sampled with {diff}; serve the trained policy with "
                    "the settings in spool.sampling, or set spool.sampling to what the fleet serves with",
                )
                continue
            seen.add(record.session_id, record.ended_at)
            nxt.pending[record.session_id] = Pending(file=name, start=start, end=end, ended_at=record.ended_at)
            out.counts["sessions"] += 1
            continue
        sid = record.session_id
        if record.at > now + config.max_clock_skew_s:
            reject("clock_skew", name, start, line, f"at = {record.at} is {record.at - now:.0f}s ahead of this clock")
            continue
        if sid not in nxt.pending and sid in seen:
            reject(
                "late_signal",
                name,
                start,
                line,
                f"session {sid!r} already trained; raise spool.signal_window_s to wait longer for signals",
            )
            continue
        waiting = nxt.pending.get(sid)
        if waiting is not None and record.at < waiting.ended_at - config.max_clock_skew_s:
            reject(
                "clock_skew",
                name,
                start,
                line,
                f"observed at {record.at}, {waiting.ended_at - record.at:.0f}s before its session ended",
            )
            continue
        held = nxt.signals.setdefault(sid, [])
        if any(s == record for s in held):
            reject("duplicate_signal", name, start, line, f"the same signal for {sid!r} was read before")
            continue
        held.append(record)
        out.counts["signals"] += 1

    nxt.ids = seen.flush(nxt.horizon)
    clock = now
    if lines.cut_short:
        out.counts["backlog_reads"] += 1
        clock = min(now, frontier(config, nxt.offsets, latest))
    for sid in sorted(nxt.pending, key=lambda s: (nxt.pending[s].ended_at, s)):
        if clock < nxt.pending[sid].ended_at + config.signal_window_s:
            continue
        where = nxt.pending.pop(sid)
        held = nxt.signals.pop(sid, [])
        signals = [s for s in held if s.at >= where.ended_at - config.max_clock_skew_s]
        out.counts["clock_skew"] += len(held) - len(signals)  # signals read before their session, observed too early
        out.due.append((sid, where, sorted(signals, key=lambda s: s.at)))
    for sid in list(nxt.signals):
        if sid in nxt.pending:
            continue
        kept = [s for s in nxt.signals[sid] if clock - s.at <= config.max_pending_s]
        out.counts["orphan_signal"] += len(nxt.signals[sid]) - len(kept)
        if kept:
            nxt.signals[sid] = kept
        else:
            del nxt.signals[sid]
    if not lines.cut_short:
        retire(nxt, config, now)
    return out


def frontier(config: SpoolConfig, offsets: dict[str, int], latest: dict[str, float]) -> float:
    """The product time a read that stopped short of the spool's end has reached: no line left unread is older
    than this. Each spool file is appended in time order (within `max_clock_skew_s`), so a file's unread lines are
    no older than the last record read from it, or than its first record when none was read yet; the frontier is
    the oldest of those over every file with unread lines, less the skew (-inf when one cannot be read)."""
    oldest = float("inf")
    for name in sorted(os.listdir(config.dir)):
        if not name.endswith(".jsonl") or name.startswith("."):
            continue
        try:
            size = (config.dir / name).stat().st_size
        except OSError:
            return float("-inf")
        at = offsets.get(name, 0)
        if size <= at:
            continue
        if name in latest:
            oldest = min(oldest, latest[name])
            continue
        first = _first_time(config.dir / name, at)
        if first is None:
            return float("-inf")
        oldest = min(oldest, first)
    return oldest - config.max_clock_skew_s


def _first_time(path: Path, offset: int) -> float | None:
    """The time of the first record at or after `offset` in a spool file (None: no whole record to read)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            for raw in f:
                if not raw.endswith(b"\n"):
                    return None
                if not raw.strip():
                    continue
                try:
                    record = parse_record(raw)
                except MalformedRecord:
                    continue
                return record.ended_at if isinstance(record, SessionRecord) else record.at
    except OSError:
        return None
    return None
