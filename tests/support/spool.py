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


def session_record(sid: str, ended: float, **fields) -> dict:
    """A session record of the spool's format (version 1) that ended at `ended`: one branch of two context tokens and
    one sampled token, user `u1`; `fields` add to it or replace its own."""
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "policy_version": 0,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 60,
        "ended_at": ended,
        "user": "u1",
        "branches": [
            {
                "segments": [
                    {"token_ids": [1, 2], "sampled": False},
                    {"token_ids": [3], "sampled": True, "logprobs": [-0.1]},
                ]
            }
        ],
        **fields,
    }


def signal_record(sid: str, at: float, **signal) -> dict:
    """A signal record for `sid` at `at`: `signal`, or an edit kept 600 s after the session."""
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": at,
        "signal": signal or {"type": "edit", "kept": True, "after_s": 600},
    }
