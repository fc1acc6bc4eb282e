"""Every durable file of the realtime loop reads back in every state (docs/realtime.md, "The cadence and its durable
state"): property-based runs over random spools (pending sessions, early and orphan signals, duplicates, rejected
lines, half-written lines) with a crash injected between any two writes (tests/support/crash.py), through the
single-process loop's batch commit and through the `realtime-sessions` taskset's journal, reopened after each crash.
No session is lost or handed out twice, every line is counted once, and every file on disk loads."""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from composer_prime.realtime import durable
from composer_prime.realtime.cycle.config import RealtimeConfig
from composer_prime.realtime.cycle.runner import Batch, State, read_batch
from composer_prime.realtime.ingest.journal import BundleData, Journal, JournalState
from composer_prime.realtime.ingest.readiness import TaskNotReady
from composer_prime.realtime.ingest.seen import SeenIds
from composer_prime.realtime.ingest.source import RealtimeSessionsTaskset
from composer_prime.realtime.ingest.source_config import RealtimeSessionsConfig
from tests.support.crash import Crash, crash_after
from tests.support.tokenizer import tiny_tokenizer

IDS = [f"s{i}" for i in range(6)]
WINDOW = 3600.0

# One spool event: a session (recent: still inside its signal window; or old), a signal (its session may come later,
# or never: an orphan), a rejected line, a half-written line finished by the next event, or a read that may crash
# after `k` durable writes.
EVENT = st.one_of(
    st.tuples(st.just("session"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("signal"), st.sampled_from([*IDS, "ghost"]), st.sampled_from(["edit", "thumbs", "undo"])),
    st.tuples(st.just("junk"), st.sampled_from(["not json", '{"schema": "composer-session", "version": 1}', "[]"])),
    st.tuples(st.just("torn"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("read"), st.one_of(st.none(), st.integers(0, 6))),
)


class Spool:
    """The product side: appends lines to real spool files, rotating every few lines, and remembers what it wrote."""

    def __init__(self, root: Path, now: float):
        self.dir = root / "spool"
        self.dir.mkdir()
        self.now = now
        self.lines = 0
        self.torn: str | None = None
        self.sessions: dict[str, bool] = {}
        """Session id -> recent, for each session whose first valid line was written."""

    def record(self, event: tuple) -> str:
        if event[0] == "session":
            _, sid, recent = event
            self.sessions.setdefault(sid, recent)
            ended = self.now - (10.0 if self.sessions[sid] else 10 * WINDOW)
            return json.dumps(
                {
                    "schema": "composer-session",
                    "version": 1,
                    "kind": "session",
                    "session_id": sid,
                    "policy_version": 0,
                    "sampling": {"temperature": 1.0},
                    "started_at": ended - 60,
                    "ended_at": ended,
                    "user": "u",
                    "branches": [
                        {
                            "segments": [
                                {"token_ids": [1, 2], "sampled": False},
                                {"token_ids": [3], "sampled": True, "logprobs": [-0.5]},
                            ]
                        }
                    ],
                }
            )
        if event[0] == "signal":
            _, sid, kind = event
            body = {
                "edit": {"type": "edit", "kept": True, "after_s": 5},
                "thumbs": {"type": "thumbs", "up": False},
                "undo": {"type": "undo"},
            }[kind]
            return json.dumps(
                {
                    "schema": "composer-session",
                    "version": 1,
                    "kind": "signal",
                    "session_id": sid,
                    "at": self.now - 5,
                    "signal": body,
                }
            )
        return event[1]

    def write(self, event: tuple) -> None:
        if self.torn is not None:  # the writer finishes a half-written line with its next append
            self._append(self.torn)
            self.torn = None
            self.lines += 1
        if event[0] == "torn":
            line = self.record(("session", event[1], event[2]))
            self._append(line[: len(line) // 2])
            self.torn = line[len(line) // 2 :] + "\n"
            return
        self._append(self.record(event) + "\n")
        self.lines += 1

    def finish(self) -> None:
        if self.torn is not None:
            self.write(("junk", "not json"))

    def _append(self, text: str) -> None:
        with (self.dir / f"{self.lines // 5:04d}.jsonl").open("a") as f:  # a new file every five lines
            f.write(text)


def counted(counts: dict[str, int]) -> int:
    """Lines the counts account for, each once (no clock skew in these spools)."""
    keys = ("sessions", "signals", "malformed", "duplicate_session", "duplicate_signal", "late_signal")
    return sum(counts.get(k, 0) for k in keys)


def single_process_cycle(config: RealtimeConfig, now: float, crash: int | None) -> bool:
    """One cycle of the single-process loop without the trainer: read or reload the batch, then commit state.json, as
    `Runner.cycle` does; a crash after `crash` writes. True when it crashed."""
    state_path = config.state_dir / "state.json"
    state = durable.load(State, state_path) if state_path.exists() else State()
    n = state.cycle + 1
    try:
        with crash_after(config.state_dir, crash):
            read_batch(config, state, n, lambda: now)
            durable.save(state_path, state.model_copy(update={"cycle": n}), indent=1)
    except Crash:
        return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, max_size=30))
def test_the_single_process_cursor_reads_back_after_a_crash_between_any_two_writes(events):
    root = Path(tempfile.mkdtemp(prefix="rt-durable-"))
    try:
        now = time.time()
        spool = Spool(root, now)
        config = RealtimeConfig(
            state_dir=root / "state",
            model_dir=root,
            spool={"dir": spool.dir, "signal_window_s": WINDOW},
            reward={"no_signal": "reward"},
            pii={"tokenizer": tiny_tokenizer()},
            cadence={"min_episodes": 1},
        )
        for event in events:
            if event[0] == "read":
                single_process_cycle(config, now, event[1])
            else:
                spool.write(event)
        spool.finish()
        while single_process_cycle(config, now, None) or single_process_cycle(config, now, None):
            pass  # until a cycle reads after the last write (one after a crash may only commit the crashed batch)
        # Every file on disk reads back; the last cursor has read every whole line and holds the recent sessions.
        state = durable.load(State, config.state_dir / "state.json")
        batches = [
            durable.load(Batch, config.state_dir / "cycles" / f"{n:06d}" / "batch.json")
            for n in range(1, state.cycle + 1)
        ]
        assert sorted(p.name for p in (config.state_dir / "cycles").iterdir()) == [
            f"{n:06d}" for n in range(1, state.cycle + 1)
        ]
        cursor = batches[-1].cursor
        assert cursor.offsets == {p.name: p.stat().st_size for p in spool.dir.iterdir()}
        assert sum(counted(b.counts) for b in batches) == spool.lines
        trained = [e.session_id for b in batches if b.train for e in b.episodes]
        assert len(trained) == len(set(trained))  # nothing twice
        recent = {sid for sid, r in spool.sessions.items() if r}
        assert set(cursor.pending) == recent and set(trained) == set(spool.sessions) - recent  # nothing lost
        assert sum(b.counts.get("sessions", 0) for b in batches) == len(spool.sessions)
        # The id memory the cursor covers holds every session accepted, and its folder nothing the cursor does not name.
        assert all(sid in SeenIds(config.state_dir / "ids", cursor.ids) for sid in spool.sessions)
        assert {p.stem for p in (config.state_dir / "ids").glob("*.ids")} == set(cursor.ids)
        # Signals whose session is still pending or never came wait in the cursor, where they read back.
        assert "ghost" not in trained
        later = now + WINDOW + 60  # the window closes: the pending sessions train with the signals they waited for
        assert not single_process_cycle(config, later, None)
        last = durable.load(Batch, config.state_dir / "cycles" / f"{state.cycle + 1:06d}" / "batch.json")
        assert sorted(e.session_id for e in last.episodes) == sorted(recent)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def drain(taskset: RealtimeSessionsTaskset, crash: int | None) -> tuple[list[BundleData], bool]:
    """Open the taskset's stream as a restarted orchestrator does and draw until a read finds nothing ready (crashing
    after `crash` journal writes, in the stream's read thread); the bundles drawn, and whether it crashed."""
    stream = iter(taskset)
    drawn: list[BundleData] = []
    try:
        with crash_after(taskset.config.journal, crash):
            while True:
                try:
                    drawn.append(next(stream).data)
                except TaskNotReady:
                    if not stream.wait():  # no read was in flight: the last one found nothing ready
                        return drawn, False
    except Crash:
        return drawn, True
    finally:
        stream.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, max_size=30))
def test_the_taskset_journal_reopens_after_a_crash_between_any_two_writes(events):
    root = Path(tempfile.mkdtemp(prefix="rt-journal-"))
    try:
        spool = Spool(root, time.time())
        config = RealtimeSessionsConfig.model_validate(
            {
                "id": "realtime-sessions",
                "spool": {"dir": str(spool.dir), "signal_window_s": WINDOW},
                "reward": {"no_signal": "reward"},
                "journal": str(root / "journal"),
                "bundle_size": 2,
                "poll_s": 1e-4,
                "pii": {"tokenizer": tiny_tokenizer()},
            }
        )
        taskset = RealtimeSessionsTaskset(config)
        for event in events:
            if event[0] == "read":
                drain(taskset, event[1])
                time.sleep(2e-4)  # past poll_s
            else:
                spool.write(event)
        spool.finish()
        while drain(taskset, None)[1]:
            pass
        time.sleep(2e-4)
        replayed, crashed = drain(taskset, None)  # a restart replays every bundle from the journal, then reads on
        assert not crashed
        state = Journal(config.journal).load()
        assert [b.bundle for b in replayed] == list(range(1, state.handed + 1))
        assert replayed == [
            durable.load(BundleData, config.journal / "bundles" / f"{n:08d}.json") for n in range(1, state.handed + 1)
        ]
        reads = [durable.load_json(config.journal / "reads" / f"{n:08d}.json") for n in range(1, state.reads + 1)]
        assert sum(counted(r["counts"]) for r in reads) == counted(state.totals) == spool.lines
        handed = [e.session_id for b in replayed for e in b.sessions]
        assert len(handed) == len(set(handed))
        recent = {sid for sid, r in spool.sessions.items() if r}
        assert set(state.cursor.pending) == recent
        seen = SeenIds(config.journal / "ids", state.cursor.ids)
        assert len(seen) == len(spool.sessions) and all(sid in seen for sid in spool.sessions)
        assert sorted([*handed, *(e.session_id for e in state.staged)]) == sorted(set(spool.sessions) - recent)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_taskset_reopens_its_journal_with_a_pending_session_and_an_early_signal(tmp_path):
    """The production case, deterministically: a session inside its signal window and a signal for a session not
    read yet are in the cursor when the orchestrator restarts."""
    from tests.unit.realtime.ingest.test_realtime_source import append, kept, session, taskset

    source = taskset(tmp_path, spool={"dir": str(tmp_path / "spool"), "signal_window_s": 600})
    append(tmp_path / "spool" / "a.jsonl", session("old", ago=7200), kept("old"), session("new", ago=5), kept("late"))
    assert drain(source, None) == ([], False)  # `old` staged, `new` pending, the signal for `late` held
    state = durable.load(JournalState, tmp_path / "journal" / "state.json")
    assert list(state.cursor.pending) == ["new"] and list(state.cursor.signals) == ["late"]
    assert '"schema":"composer-session"' in (tmp_path / "journal" / "state.json").read_text()
    append(tmp_path / "spool" / "a.jsonl", session("late", ago=7200), kept("new"))
    time.sleep(0.06)
    [bundle], crashed = drain(source, None)  # reopened: the early signal joins `late`
    assert not crashed and sorted(e.session_id for e in bundle.sessions) == ["late", "old"]
    assert {e.session_id: e.signals for e in bundle.sessions}["late"] == ["edit"]


def test_a_durable_file_that_does_not_read_back_is_named_with_the_fix(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"cycle": "three"}')
    with pytest.raises(durable.DurableError, match=r"state.json' is not a State: cycle: .*move the state aside"):
        durable.load(State, path)


def test_only_the_durable_module_writes_or_reads_model_json_in_the_realtime_package():
    """One serialization path: no other realtime module calls `model_dump_json` / `model_validate_json`."""
    root = Path(__file__).resolve().parents[3]
    offenders = []
    for path in [
        *(root / "composer_prime" / "realtime").glob("*.py"),
        *(root / "environments" / "realtime_sessions").rglob("*.py"),
    ]:
        if path.name == "durable.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("model_dump_json", "model_validate_json"):
                if not (path.name == "records.py" and node.attr == "model_dump_json"):  # a spool line, by alias
                    offenders.append(f"{path.name}:{node.lineno} {node.attr}")
    assert offenders == []
