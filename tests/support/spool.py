"""One read of a realtime spool as a restarted reader makes it: the session-id memory loaded from disk up to what the
committed cursor covers (beside the spool dir, in `ids/`), the read, and the sweep that follows a commit."""

from __future__ import annotations

from composer_prime.realtime.ingest.seen import SeenIds
from composer_prime.realtime.ingest.spool import Advance, Cursor, SpoolConfig, advance


def read_spool(cursor: Cursor, config: SpoolConfig, now: float) -> Advance:
    seen = SeenIds(config.dir.parent / "ids", cursor.ids)
    step = advance(cursor, config, now, seen)
    seen.sweep()
    return step
