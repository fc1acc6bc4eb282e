"""The realtime ingest path on real spool files: format, durable cursor, signal join, reward model, staleness, PII
hooks and monitors (no model: episodes carry hand-made token ids)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer_prime.realtime import durable
from composer_prime.realtime.ingest.join import assign_advantages, build_episodes
from composer_prime.realtime.ingest.spool import Cursor, SpoolConfig, SpoolError
from composer_prime.realtime.ingest.staleness import StalenessConfig, Steps, classify, importance_weight
from composer_prime.realtime.monitors import alerts, tampering
from composer_prime.realtime.monitors.pii import PIIConfig, Scrubber, load_hooks
from composer_prime.realtime.monitors.reward import RewardModelConfig, session_reward
from composer_prime.realtime.records import MalformedRecord, parse_record
from tests.support.spool import read_spool, signal_record

NOW = 1_800_000_000.0


def session(
    sid: str, version: int = 0, ended: float = NOW - 3600, logprobs: list[float] | None = None, **extra
) -> dict:
    sampled = {"token_ids": [7, 8, 9], "sampled": True}
    if logprobs is not False:
        sampled["logprobs"] = logprobs or [-0.1, -0.2, -0.3]
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "policy_version": version,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 60,
        "ended_at": ended,
        "user": "u1",
        "branches": [{"segments": [{"token_ids": [1, 2, 3, 4], "sampled": False}, sampled]}],
        **extra,
    }


def signal(sid: str, at: float = NOW - 3000, **body) -> dict:
    return signal_record(sid, at, **body)


def append(path: Path, *records) -> None:
    with path.open("a") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


@pytest.fixture
def spool(tmp_path: Path) -> SpoolConfig:
    (tmp_path / "spool").mkdir()
    return SpoolConfig(dir=tmp_path / "spool", signal_window_s=600, max_clock_skew_s=300)


def test_records_parse_and_bad_lines_name_the_problem():
    assert parse_record(json.dumps(session("a"))).session_id == "a"
    with pytest.raises(MalformedRecord, match="version = 2; this reader reads version 1"):
        parse_record(json.dumps({**session("a"), "version": 2}))
    with pytest.raises(MalformedRecord, match="not JSON"):
        parse_record('{"schema": ')
    with pytest.raises(MalformedRecord, match="policy_version"):
        parse_record(json.dumps({**session("a"), "policy_version": -1}))
    with pytest.raises(MalformedRecord, match="ended_at"):
        parse_record(json.dumps(session("a", ended=NOW) | {"started_at": NOW + 5}))


def test_every_line_is_accepted_or_counted_and_quarantined(spool):
    append(
        spool.dir / "a.jsonl",
        session("s1"),
        signal("s1"),
        session("s1"),
        "not json",
        session("s2", logprobs=False),
        session("s3", logprobs=[0.5, -1, -1]),
        session("s4", ended=NOW + 3600),
        signal("s1"),
        signal("s9", at=NOW + 3600),
        session("s5"),
    )
    step = read_spool(Cursor(), spool, NOW)
    counts = step.counts
    assert counts["sessions"] == 2 and counts["signals"] == 1
    assert counts["duplicate_session"] == 1 and counts["malformed"] == 1 and counts["missing_logprobs"] == 2
    assert counts["clock_skew"] == 2 and counts["duplicate_signal"] == 1
    assert len(step.rejected) == 7 and all(r["length"] and r["sha256"] and r["detail"] for r in step.rejected)
    assert [r.session.session_id for r in step.ready] == ["s1", "s5"]
    assert [len(r.signals) for r in step.ready] == [1, 0]


def test_a_half_written_line_waits_and_restart_neither_loses_nor_repeats(spool):
    path = spool.dir / "a.jsonl"
    append(path, session("s1"))
    with path.open("a") as f:
        f.write(json.dumps(session("s2"))[:40])  # the writer is mid-line
    first = read_spool(Cursor(), spool, NOW)
    assert [r.session.session_id for r in first.ready] == ["s1"] and not first.rejected
    # Restart from the durable cursor (a JSON round trip, as the cycle runner stores it).
    cursor = Cursor.model_validate_json(durable.dumps(first.cursor))
    with path.open("a") as f:
        f.write(json.dumps(session("s2"))[40:] + "\n")
    append(path, session("s1"))  # a retried upload of a trained session
    second = read_spool(cursor, spool, NOW)
    assert [r.session.session_id for r in second.ready] == ["s2"]
    assert second.counts["duplicate_session"] == 1
    assert read_spool(second.cursor, spool, NOW).ready == []  # nothing new: nothing twice


def test_signals_join_late_early_and_in_any_order(spool):
    recent = NOW - 100  # inside the signal window
    append(spool.dir / "a.jsonl", signal("s1", at=recent + 50, type="thumbs", up=False), session("s1", ended=recent))
    step = read_spool(Cursor(), spool, NOW)
    assert step.ready == [] and "s1" in step.cursor.pending  # waits for edit persistence
    append(spool.dir / "b.jsonl", signal("s1", at=recent + 500, type="edit", kept=True, after_s=500))
    later = read_spool(step.cursor, spool, NOW + 600)
    assert [s.signal.type for s in later.ready[0].signals] == ["thumbs", "edit"]
    append(spool.dir / "b.jsonl", signal("s1", at=NOW + 700, type="undo"))
    assert read_spool(later.cursor, spool, NOW + 700).counts["late_signal"] == 1


def test_orphan_signals_expire_and_a_shrunk_file_stops_the_reader(spool):
    append(spool.dir / "a.jsonl", signal("ghost", at=NOW - 10))
    step = read_spool(Cursor(), spool, NOW)
    assert "ghost" in step.cursor.signals
    assert read_spool(step.cursor, spool, NOW + spool.max_pending_s + 1).counts["orphan_signal"] == 1
    (spool.dir / "a.jsonl").write_text("")
    with pytest.raises(SpoolError, match="truncated or replaced"):
        read_spool(step.cursor, spool, NOW)


def test_reward_model_latest_signal_per_kind_weighted_mean():
    from composer_prime.realtime.records import SignalRecord

    def rec(at, **body):
        return SignalRecord.model_validate(signal("s", at=at, **body))

    config = RewardModelConfig(edit=1.0, tests=0.5, thumbs=0.5, undo=1.0)
    # edit kept then reverted -> -1 (weight 1); thumbs up +1 (weight 0.5): (-1 + 0.5) / 1.5
    signals = [
        rec(1, type="edit", kept=True, after_s=60),
        rec(2, type="edit", kept=False, after_s=600),
        rec(3, type="thumbs", up=True),
    ]
    assert session_reward(signals, config) == pytest.approx(-1 / 3)
    assert session_reward([], config) is None
    assert session_reward([], RewardModelConfig(no_signal="reward", no_signal_reward=0.1)) == 0.1
    assert session_reward([rec(1, type="undo")], config) == -1.0
    # A kept edit whose tests all fail: the weighted mean would be (1 - 0.5) / 1.5 = +0.33; the tests are a ceiling.
    failing = [rec(1, type="edit", kept=True, after_s=60), rec(2, type="tests", passed=0, failed=4)]
    assert session_reward(failing, config) == -1.0
    # One failing test of four is a failing run: the weighted mean (1 + 0.25) / 1.5 = +0.83 would beat a baseline of
    # reverted edits; at the floor no baseline (a mean of rewards >= -1) leaves it a positive advantage.
    most = [rec(1, type="edit", kept=True, after_s=60), rec(2, type="tests", passed=3, failed=1)]
    assert session_reward(most, config) == -1.0
    passing = [rec(1, type="edit", kept=True, after_s=60), rec(2, type="tests", passed=4, failed=0)]
    assert session_reward(passing, config) == 1.0
    nothing_ran = [rec(1, type="edit", kept=True, after_s=60), rec(2, type="tests", passed=0, failed=0)]
    assert session_reward(nothing_ran, config) == -1.0  # a collection error reports 0 / 0: a failing run
    # Any failing run counts, not only the latest: a one-test rerun that passes, or one that collected nothing.
    for rerun in ({"passed": 1, "failed": 0}, {"passed": 0, "failed": 0}):
        signals = [
            rec(1, type="edit", kept=True, after_s=60),
            rec(2, type="tests", passed=10, failed=3),
            rec(3, type="tests", **rerun),
        ]
        assert session_reward(signals, config) == -1.0


def test_staleness_drop_or_weight_and_counts(spool):
    config = StalenessConfig(max_age=1, mode="importance_weight", hard_max_age=3)
    assert [classify(a, config) for a in (-1, 0, 1, 2, 4)] == ["future_version", "fresh", "fresh", "weight", "drop"]
    assert classify(2, StalenessConfig(max_age=1)) == "drop"
    # geometric mean of the per-token ratios: exp(mean(-0.2, 0.0)) = exp(-0.1); capped at 1
    assert importance_weight([-1.2, -1.0], [-1.0, -1.0], 1.0) == pytest.approx(0.904837, rel=1e-5)
    assert importance_weight([0.0], [-1.0], 1.0) == 1.0
    with pytest.raises(ValueError, match="hard_max_age = 0 is below max_age = 1"):
        StalenessConfig(max_age=1, hard_max_age=0)
    append(
        spool.dir / "a.jsonl", *(session(f"v{v}", version=v) for v in range(6)), *(signal(f"v{v}") for v in range(6))
    )
    ready = read_spool(Cursor(), spool, NOW).ready
    steps = Steps(now=4, versions={v: v for v in range(5)})  # one trainer step per version
    episodes, counts = build_episodes(ready, steps, RewardModelConfig(), config, Scrubber(PIIConfig(scan=False)))
    assert counts == {"future_version": 1, "stale_dropped": 1, "stale_weighted": 2, "fresh": 2}
    assert sorted((e.age, e.importance_weighted) for e in episodes) == [(0, False), (1, False), (2, True), (3, True)]
    episodes[0].group = episodes[1].group = "g"
    episodes[0].reward, episodes[1].reward, episodes[2].reward, episodes[3].reward = 1.0, 0.0, 1.0, -1.0
    assign_advantages(episodes)
    # group g baseline 0.5; the two ungrouped sessions use the batch mean 0.25
    assert [e.advantage for e in episodes] == [0.5, -0.5, 0.75, -1.25]
    assert episodes[0].samples[0].mask == [False] * 4 + [True] * 3
    assert episodes[0].samples[0].logprobs == [0.0] * 4 + [-0.1, -0.2, -0.3]


def no_second_user(session):
    """A scrubbing hook: drops sessions of user u2."""
    return None if session.user == "u2" else session


def test_pii_hooks_drop_sessions_and_bad_paths_are_named(spool):
    append(spool.dir / "a.jsonl", session("s1", user="u2"), session("s2"), signal("s1"), signal("s2"))
    ready = read_spool(Cursor(), spool, NOW).ready
    scrub = Scrubber(PIIConfig(scan=False, hooks=[f"{__name__}.no_second_user"]))
    episodes, counts = build_episodes(ready, Steps(), RewardModelConfig(), StalenessConfig(), scrub)
    assert [e.session_id for e in episodes] == ["s2"] and counts["pii_dropped"] == 1
    with pytest.raises(ValueError, match="pii.hooks: 'nowhere.hook' does not import"):
        load_hooks(["nowhere.hook"])


def test_monitors_pause_on_live_reward_hacking():
    from composer_prime.realtime.ingest.join import Episode

    def ep(reward, tokens=40, disabled=False):
        return Episode(
            session_id="x",
            user="u",
            group="",
            policy_version=0,
            age=0,
            reward=reward,
            signals=[],
            sampled_tokens=tokens,
            samples=[],
            disabled_tests=disabled,
        )

    config = alerts.MonitorsConfig()
    history = [{"reward": 0.1, "heldout": 0.6}, {"reward": 0.3, "heldout": 0.55}, {"reward": 0.5, "heldout": 0.5}]
    raised = alerts.check(config, [ep(1.0)], history)
    assert [(a.monitor, a.pause) for a in raised] == [("reward_vs_heldout", True)]
    assert alerts.check(config, [ep(1.0)], [{**h, "heldout": 0.6} for h in history]) == []
    hacked = [ep(1.0, disabled=True), ep(1.0)]
    assert [a.monitor for a in alerts.check(config, hacked, history[:1])] == ["edits_disable_tests"]
    short = [ep(1.0, tokens=2)] * 8 + [ep(-1.0, tokens=40)] * 20
    raised = alerts.check(config, short, history[:1])
    assert [(a.monitor, a.pause) for a in raised] == [("short_high_reward", False)]


def test_edit_facts_see_tests_disabled():
    def call(name, **args):
        return {"role": "assistant", "tool_calls": [{"function": {"name": name, "arguments": json.dumps(args)}}]}

    skip = call(
        "str_replace",
        path="tests/test_m.py",
        old_str="def test_a():\n    assert f() == 1",
        new_str="@pytest.mark.skip\ndef test_a():\n    assert f() == 1",
    )
    drop_assert = call("str_replace", path="tests/test_m.py", old_str="    assert f() == 1", new_str="    pass")
    honest = call("str_replace", path="m.py", old_str="return 0", new_str="return 1")
    assert tampering.edit_facts([skip]) == (["tests/test_m.py"], True)
    assert tampering.edit_facts([drop_assert])[1] is True
    assert tampering.edit_facts([honest]) == (["m.py"], False)


def test_a_session_replays_as_a_verifiers_trace_with_its_serving_logprobs(spool):
    from composer_prime.realtime.cycle.trainer import trace_samples
    from composer_prime.realtime.ingest.join import samples_of
    from composer_prime.realtime.ingest.traces import session_trace
    from composer_prime.realtime.records import SessionRecord

    two = session("s1", logprobs=[-0.1, -0.2, -0.3])
    two["branches"].append(
        {
            "segments": [
                {"token_ids": [5, 6], "sampled": False},
                {"token_ids": [11, 12], "sampled": True, "logprobs": [-1.0, -2.0]},
            ]
        }
    )
    record = SessionRecord.model_validate(two)
    trace = session_trace(record, reward=0.5)
    assert trace.reward == 0.5 and trace.info["realtime"]["session_id"] == "s1"
    # The single-process trainer reads traces as PRIME-RL's trace_to_samples does: the same samples the CPU loop trains.
    replayed = [(s.token_ids, s.mask, s.logprobs) for s in trace_samples(trace)]
    direct = [(s.token_ids, s.mask, s.logprobs) for s in samples_of(record)]
    assert replayed == direct
    assert direct[1] == ([5, 6, 11, 12], [False, False, True, True], [0.0, 0.0, -1.0, -2.0])
