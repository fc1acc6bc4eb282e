"""The smaller failures of issue 29, each on real files, processes and HTTP servers: an unreadable spool, a torn line
followed by an append, a backlog beyond `max_lines_per_cycle`, sessions dated 1970, a full disk, shipped weights'
mode, a relative state dir sent to the relay, and a failed ship leaving the fleet paused."""

from __future__ import annotations

import json
import os
import resource
import stat
import tempfile
from pathlib import Path

import pytest

from composer_prime.realtime import durable
from composer_prime.realtime.cycle.cluster import copy_step
from composer_prime.realtime.cycle.runner import ShipError, notify
from composer_prime.realtime.ingest.spool import Cursor, SpoolConfig
from tests.support.spool import read_spool
from tests.support.vllm_admin import AdminStandIn
from tests.unit.realtime.ingest.test_realtime_ingest import NOW, append, session, signal


def in_child(run, uid: int | None = None, fsize: int | None = None) -> str:
    """`run()` in a forked child (as `uid`, under a file-size limit of `fsize` bytes); what it returned or raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanup
        try:
            os.close(read)
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            try:
                out = f"returned {run()!r}"
            except BaseException as err:  # noqa: BLE001 - reported to the parent
                out = f"{type(err).__name__}: {err}"
            os.write(write, out.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def test_an_unreadable_spool_folder_is_a_clear_error_not_an_empty_cycle():
    root = Path(tempfile.mkdtemp(prefix="rt-unreadable-"))
    root.chmod(0o755)
    spool = root / "spool"
    spool.mkdir()
    append(spool / "a.jsonl", session("s1"))
    spool.chmod(0o000)
    try:
        config = SpoolConfig(dir=spool)
        uid = 65534 if os.geteuid() == 0 else None  # root reads any folder: the reader runs as `nobody`
        out = in_child(lambda: len(read_spool(Cursor(), config, NOW).ready), uid=uid)
    finally:
        spool.chmod(0o755)
    assert out.startswith("SpoolError: spool dir") and "cannot be listed (Permission denied)" in out, out


def test_a_torn_line_followed_by_an_append_loses_no_record(tmp_path):
    spool = SpoolConfig(dir=tmp_path, signal_window_s=0)
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write(json.dumps(session("torn"))[:50])  # the writer died mid-record; the next writer appends
    append(tmp_path / "a.jsonl", session("s1"), signal("s1"))
    step = read_spool(Cursor(), spool, NOW)
    assert [r.session.session_id for r in step.ready] == ["s1"] and len(step.ready[0].signals) == 1
    assert step.counts["malformed"] == 1 and "a torn line" in step.rejected[0]["detail"]
    assert step.rejected[0]["length"] == 50


def test_a_backlog_beyond_the_line_limit_keeps_its_sessions_signals(tmp_path):
    spool = SpoolConfig(dir=tmp_path, signal_window_s=600, max_lines_per_cycle=30)
    append(tmp_path / "a.jsonl", *(session(f"s{i}") for i in range(30)))
    append(tmp_path / "b.jsonl", *(signal(f"s{i}") for i in range(30)))
    first = read_spool(Cursor(), spool, NOW)
    assert first.ready == [] and first.counts["backlog_reads"] == 1 and len(first.cursor.pending) == 30
    second = read_spool(first.cursor, spool, NOW)
    assert len(second.ready) == 30 and all(len(r.signals) == 1 for r in second.ready)
    assert second.counts["late_signal"] == 0 and second.counts["signals"] == 30


def test_a_backlog_read_in_slices_holds_a_signal_window_not_the_backlog(tmp_path):
    """A day of traffic (a session a minute, its signal 30 s later) read 100 lines at a time: each read releases the
    sessions whose window the spool's own clock has passed, with their signals, so the cursor holds about a window
    of sessions (600 s, plus the 300 s skew: some 15) whatever the backlog; every session trains once, none late."""
    spool = SpoolConfig(dir=tmp_path, signal_window_s=600, max_clock_skew_s=300, max_lines_per_cycle=100)
    start = NOW - 2 * 86400
    records = []
    for i in range(1440):
        records += [session(f"s{i}", ended=start + 60 * i), signal(f"s{i}", at=start + 60 * i + 30)]
    append(tmp_path / "a.jsonl", *records)
    cursor, released, held = Cursor(), [], []
    for _ in range(40):
        step = read_spool(cursor, spool, NOW)
        released += [(r.session.session_id, len(r.signals)) for r in step.ready]
        cursor = step.cursor
        held.append(len(cursor.pending) + len(cursor.signals))
        assert step.counts["late_signal"] == 0
    assert released == [(f"s{i}", 1) for i in range(1440)]
    assert max(held) <= 40 and cursor.pending == {} and cursor.signals == {}


def test_a_backlog_in_files_of_different_writers_holds_until_every_file_has_passed_the_window(tmp_path):
    """Two writers' files read one after the other: the second's unread lines are as old as its first record, so
    a read that stopped in the first file releases nothing whose signal the second may still hold."""
    spool = SpoolConfig(dir=tmp_path, signal_window_s=600, max_clock_skew_s=300, max_lines_per_cycle=50)
    start = NOW - 86400
    append(tmp_path / "a.jsonl", *(session(f"s{i}", ended=start + 60 * i) for i in range(100)))
    append(tmp_path / "b.jsonl", *(signal(f"s{i}", at=start + 60 * i + 30) for i in range(100)))
    first = read_spool(Cursor(), spool, NOW)
    second = read_spool(first.cursor, spool, NOW)
    assert first.ready == [] and second.ready == [] and len(second.cursor.pending) == 100
    third = read_spool(second.cursor, spool, NOW)  # half of b: the sessions its clock has passed go
    fourth = read_spool(third.cursor, spool, NOW)  # the rest of b: the spool's end, the wall clock
    assert 0 < len(third.ready) < 100 and fourth.cursor.pending == {}
    done = [(r.session.session_id, len(r.signals)) for step in (third, fourth) for r in step.ready]
    assert sorted(done) == sorted((f"s{i}", 1) for i in range(100))


def test_a_session_dated_1970_is_rejected_naming_the_clock(tmp_path):
    append(tmp_path / "a.jsonl", session("epoch", ended=0.0), signal("epoch", at=5.0), session("ok"), signal("ok"))
    step = read_spool(Cursor(), SpoolConfig(dir=tmp_path), NOW)
    assert [r.session.session_id for r in step.ready] == ["ok"] and step.counts["too_old"] == 1
    assert "check the product's clock" in step.rejected[0]["detail"]


def test_a_full_disk_is_a_clear_error_and_leaves_the_previous_file(tmp_path):
    path = tmp_path / "state.json"
    durable.save(path, {"cycle": 1})
    out = in_child(lambda: durable.save(path, {"cycle": 2, "pad": "x" * 100_000}), fsize=4096)
    assert out.startswith("DurableError: cannot write") and "free space" in out, out
    assert json.loads(path.read_text()) == {"cycle": 1} and [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_shipped_weights_are_readable_by_the_relay_and_the_servers(tmp_path):
    step = tmp_path / "rl" / "step_7"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"weights")
    (step / "model.safetensors").chmod(0o600)  # as safetensors writes it
    shipped = copy_step(step, tmp_path / "state", 3)
    assert stat.S_IMODE((shipped / "model.safetensors").stat().st_mode) == 0o644 & ~current_umask()


def current_umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def test_the_relay_is_sent_an_absolute_weight_dir_and_a_failed_update_resumes_the_fleet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state" / "broadcasts" / "step_1").mkdir(parents=True)
    (tmp_path / "state" / "broadcasts" / "step_1" / "model.safetensors").write_bytes(b"w")
    with AdminStandIn() as proxy:
        notify([proxy.url], Path("state/broadcasts/step_1"), 5)
        [update] = proxy.updates()
        assert update.body == {"weight_dir": str(tmp_path / "state" / "broadcasts" / "step_1")}
        with pytest.raises(ShipError, match="update_weights answered 500"):
            notify([proxy.url], Path("state/broadcasts/step_2"), 5)  # not there: the server refuses the update
        routes = [c.path for c in proxy.calls]
    assert routes == ["/pause", "/update_weights", "/resume"] * 2  # paused, refused, resumed: the fleet serves on
