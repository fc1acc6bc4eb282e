"""The spool reader: what is new in the session-log files since a durable cursor, sorted into sessions ready to
train, sessions still waiting for their signals, and counted rejects.

The spool is a folder of append-only JSONL files (`*.jsonl`, read in name order; a product rotates by starting a
new file). The cursor is the byte offset up to which each file has been consumed. Only whole lines are consumed: a
line still being written (no newline yet) is read on a later pass. A file shorter than its offset was truncated or
replaced, which would silently lose or repeat records, so the reader stops with an error naming it.

`Cursor` is plain data: the offsets, every session id ever accepted (so a duplicate is caught across restarts),
where each session waiting out its signal window is in the spool (file, byte range, end time: the session itself is
read again from the spool when its window closes, so no copy of its text or tokens sits in the state), and signals
whose session has not been read yet (typed values, no free text). `advance` is a pure
step from one cursor to the next; the cycle runner writes the new cursor in the same atomic file as the batch it
trains on (`cycle.py`), so after a crash a cycle either re-reads nothing or trains the same batch again from the
last checkpoint: nothing is lost and nothing is trained twice.

Every line goes exactly one way: accepted (a session, or a signal joined to one), or rejected with a reason in
`Advance.rejected` (where it is, its length and SHA-256, and the reason's detail with secrets redacted; never the
line itself, which may hold a secret), and counted in `Advance.counts`:
`malformed` (a torn line is counted here and the record appended after it read on its own), `missing_logprobs`,
`sampling_mismatch`, `duplicate_session`, `duplicate_signal`, `clock_skew`, `too_old`, `late_signal` (its session already trained),
`orphan_signal` (no session within `max_pending_s`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime.pii import redact
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
    """File name -> bytes consumed."""
    seen: list[str] = Field(default_factory=list)
    """Every session id accepted so far (pending or trained)."""
    trained: list[str] = Field(default_factory=list)
    """Session ids handed to a cycle."""
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
    cursor: Cursor
    ready: list[Ready] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    rejected: list[dict] = field(default_factory=list)


class SpoolError(RuntimeError):
    """The spool cannot be read safely (a file shrank or vanished); the message names the file and the fix."""


def new_lines(spool: Path, offsets: dict[str, int], limit: int) -> tuple[list[tuple[str, int, int, bytes]], bool]:
    """(file, start, end, line) of each complete new line, in file-name then byte order, and whether `limit` cut the
    read short (more whole lines are waiting)."""
    if not spool.is_dir():
        raise SpoolError(f"spool dir {str(spool)!r} does not exist; create it or point spool.dir at the folder the "
                         "serving product writes session logs to")  # fmt: skip
    try:
        names = sorted(n for n in os.listdir(spool) if n.endswith(".jsonl") and not n.startswith("."))
    except OSError as err:
        raise SpoolError(f"spool dir {str(spool)!r} cannot be listed ({err.strerror}); give this user read and "
                         "execute permission on it") from None  # fmt: skip
    found: list[tuple[str, int, int, bytes]] = []
    missing = sorted(set(offsets) - set(names))
    if missing:
        raise SpoolError(f"spool file {missing[0]!r} was read up to byte {offsets[missing[0]]} and is gone; spool "
                         "files are append-only: archive them only after the cursor has moved past them and keep "
                         "their names out of the spool dir")  # fmt: skip
    for name in names:
        start = offsets.get(name, 0)
        path = spool / name
        try:
            size = path.stat().st_size
            if size < start:
                raise SpoolError(f"spool file {name!r} is {size} bytes but {start} were already read: it was "
                                 "truncated or replaced; spool files are append-only (start a new file to rotate)")  # fmt: skip
            if size == start:
                continue
            with path.open("rb") as f:
                f.seek(start)
                data = f.read(size - start)
        except OSError as err:
            raise SpoolError(f"spool file {name!r} cannot be read ({err.strerror}); give this user read permission "
                             "on it") from None  # fmt: skip
        end = data.rfind(b"\n") + 1
        pos = start
        for raw in data[:end].splitlines(keepends=True):
            if len(found) >= limit:
                return found, True
            found.append((name, pos, pos + len(raw), raw.rstrip(b"\r\n")))
            pos += len(raw)
    return found, False


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
        raise SpoolError(f"session {sid!r} waits for its signals at {where.file!r} bytes {where.start}..{where.end}, "
                         f"which no longer reads back ({err}); spool files are append-only and must stay until "
                         "the cursor's pending sessions have trained") from None  # fmt: skip
    if not isinstance(record, SessionRecord) or record.session_id != sid:
        raise SpoolError(f"{where.file!r} bytes {where.start}..{where.end} no longer hold session {sid!r}: the file "
                         "was rewritten; spool files are append-only")  # fmt: skip
    return record


def advance(cursor: Cursor, config: SpoolConfig, now: float) -> Advance:
    """Read what is new after `cursor`; return the next cursor, the sessions ready at `now`, counts and rejects."""
    nxt = cursor.model_copy(deep=True)
    out = Advance(cursor=nxt)
    seen = set(nxt.seen)
    trained = set(nxt.trained)

    def reject(reason: str, name: str, start: int, line: bytes, detail: str) -> None:
        out.counts[reason] += 1
        out.rejected.append({"reason": reason, "file": name, "offset": start, "length": len(line),
                             "sha256": hashlib.sha256(line).hexdigest(), "detail": redact(detail)})  # fmt: skip

    lines, cut_short = new_lines(config.dir, nxt.offsets, config.max_lines_per_cycle)
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
            reject("malformed", name, start, torn[0], "a torn line: the writer stopped mid-record and the next record "
                   "was appended after it (read on its own)")  # fmt: skip
            start += len(torn[0])
            line = torn[1]
            try:
                record = parse_record(line)
            except MalformedRecord as err:
                reject("malformed", name, start, line, str(err))
                continue
        if isinstance(record, SessionRecord):
            if record.session_id in seen:
                reject("duplicate_session", name, start, line, f"session_id {record.session_id!r} was read before")
                continue
            if record.ended_at < now - config.max_session_age_s:
                reject("too_old", name, start, line, f"ended_at = {record.ended_at} is {now - record.ended_at:.0f}s "
                       f"before this clock (spool.max_session_age_s = {config.max_session_age_s}); check the "
                       "product's clock")  # fmt: skip
                continue
            if record.ended_at > now + config.max_clock_skew_s:
                reject("clock_skew", name, start, line, f"ended_at = {record.ended_at} is "
                       f"{record.ended_at - now:.0f}s ahead of this clock (max_clock_skew_s = {config.max_clock_skew_s})")  # fmt: skip
                continue
            try:
                check_logprobs(record)
            except MissingLogprobs as err:
                reject("missing_logprobs", name, start, line, str(err))
                continue
            if record.sampling != config.sampling:
                got, want = record.sampling.model_dump(), config.sampling.model_dump()
                diff = ", ".join(f"{k} = {got[k]} (the trainer assumes {want[k]})" for k in want if got[k] != want[k])
                reject("sampling_mismatch", name, start, line, f"sampled with {diff}; serve the trained policy with "
                       "the settings in spool.sampling, or set spool.sampling to what the fleet serves with")  # fmt: skip
                continue
            seen.add(record.session_id)
            nxt.seen.append(record.session_id)
            nxt.pending[record.session_id] = Pending(file=name, start=start, end=end, ended_at=record.ended_at)
            out.counts["sessions"] += 1
            continue
        sid = record.session_id
        if record.at > now + config.max_clock_skew_s:
            reject("clock_skew", name, start, line, f"at = {record.at} is {record.at - now:.0f}s ahead of this clock")
            continue
        if sid in trained:
            reject("late_signal", name, start, line, f"session {sid!r} already trained; raise spool.signal_window_s "
                   "to wait longer for signals")  # fmt: skip
            continue
        waiting = nxt.pending.get(sid)
        if waiting is not None and record.at < waiting.ended_at - config.max_clock_skew_s:
            reject("clock_skew", name, start, line, f"observed at {record.at}, {waiting.ended_at - record.at:.0f}s "
                   "before its session ended")  # fmt: skip
            continue
        held = nxt.signals.setdefault(sid, [])
        if any(s == record for s in held):
            reject("duplicate_signal", name, start, line, f"the same signal for {sid!r} was read before")
            continue
        held.append(record)
        out.counts["signals"] += 1

    if cut_short:  # the backlog's unread lines may hold these sessions' signals, or the sessions of held signals
        out.counts["backlog_reads"] += 1
        return out
    for sid in sorted(nxt.pending, key=lambda s: (nxt.pending[s].ended_at, s)):
        if now < nxt.pending[sid].ended_at + config.signal_window_s:
            continue
        session = read_pending(config.dir, sid, nxt.pending[sid])
        held = nxt.signals.pop(sid, [])
        signals = [s for s in held if s.at >= session.ended_at - config.max_clock_skew_s]
        out.counts["clock_skew"] += len(held) - len(signals)  # signals read before their session, observed too early
        out.ready.append(Ready(session, sorted(signals, key=lambda s: s.at)))
        del nxt.pending[sid]
        nxt.trained.append(sid)
    for sid in list(nxt.signals):
        if sid in nxt.pending:
            continue
        kept = [s for s in nxt.signals[sid] if now - s.at <= config.max_pending_s]
        out.counts["orphan_signal"] += len(nxt.signals[sid]) - len(kept)
        if kept:
            nxt.signals[sid] = kept
        else:
            del nxt.signals[sid]
    return out
