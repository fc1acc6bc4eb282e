"""The `realtime-sessions` taskset on real spool files: bundles stream as sessions arrive, the hand-out journal
replays what PRIME-RL's resume discards, and every skip is counted (docs/realtime.md, "The PRIME-RL source")."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from composer_prime.atomic import write_atomic
from composer_prime.realtime.ingest.readiness import TaskNotReady
from composer_prime.realtime.ingest.source import RealtimeSessionsTaskset
from composer_prime.realtime.ingest.source_config import RealtimeSessionsConfig
from tests.support.tokenizer import tiny_tokenizer


def session(sid: str, group: str = "", version: int = 0, ago: float = 120.0, logprobs=True, **extra) -> dict:
    ended = time.time() - ago
    sampled = {"token_ids": [7, 8, 9], "sampled": True}
    if logprobs:
        sampled["logprobs"] = [-0.1, -0.2, -0.3]
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "group": group,
        "policy_version": version,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 60,
        "ended_at": ended,
        "user": "u1",
        "branches": [{"segments": [{"token_ids": [1, 2, 3, 4], "sampled": False}, sampled]}],
        **extra,
    }


def kept(sid: str, value: bool = True) -> dict:
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": time.time() - 60,
        "signal": {"type": "edit", "kept": value, "after_s": 30},
    }


def append(path: Path, *records) -> None:
    with path.open("a") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def taskset(tmp_path: Path, **overrides) -> RealtimeSessionsTaskset:
    (tmp_path / "spool").mkdir(exist_ok=True)
    config = {
        "id": "realtime-sessions",
        "spool": {"dir": str(tmp_path / "spool"), "signal_window_s": 0},
        "journal": str(tmp_path / "journal"),
        "bundle_size": 2,
        "poll_s": 0.05,
        "pii": {"tokenizer": tiny_tokenizer()},
        **overrides,
    }
    return RealtimeSessionsTaskset(RealtimeSessionsConfig.model_validate(config))


def draw(stream, n: int = 1, timeout: float = 30.0) -> list:
    """The next `n` tasks of the stream, asked for again while it answers "not ready" (as PRIME-RL's dispatcher does on
    each pass), failing when none comes within `timeout`."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        try:
            out.append(next(stream))
        except TaskNotReady:
            assert time.monotonic() < deadline, f"the taskset gave {len(out)} of {n} tasks in {timeout} s"
            time.sleep(0.01)
    return out


def ids(task) -> list[str]:
    return [e.session_id for e in task.data.sessions]


def test_bundles_are_baseline_groups_and_the_stream_gives_new_sessions_as_they_arrive(tmp_path):
    source = taskset(tmp_path)
    spool = tmp_path / "spool" / "a.jsonl"
    append(
        spool,
        session("g1", "repo-a"),
        kept("g1"),
        session("x1"),
        kept("x1", False),
        session("g2", "repo-a"),
        kept("g2", False),
        session("y1", "repo-b"),
        kept("y1"),
    )
    stream = iter(source)
    first, second = draw(stream, 2)
    assert (first.data.group, ids(first)) == ("repo-a", ["g1", "g2"])  # a group with enough sessions: its own
    assert (second.data.group, ids(second)) == ("", ["x1", "y1"])  # the rest, read together
    assert [e.reward for e in first.data.sessions] == [1.0, -1.0]
    assert first.data.counts == {"sessions": 4, "signals": 4, "fresh": 4} and second.data.counts == {}
    assert first.key == "realtime-bundle-00000001" and type(source).INFINITE

    def later():  # the product appends while the orchestrator waits on the stream
        time.sleep(0.5)
        append(spool, session("z1"), kept("z1"), session("z2"), kept("z2"))

    writer = threading.Thread(target=later)
    started = time.monotonic()
    writer.start()
    [third] = draw(stream)
    writer.join()
    assert ids(third) == ["z1", "z2"] and time.monotonic() - started >= 0.5
    stream.close()


def test_while_nothing_is_ready_a_draw_answers_at_once_and_the_spool_is_read_every_poll_s(tmp_path):
    source = taskset(tmp_path, poll_s=0.4)
    spool = tmp_path / "spool" / "a.jsonl"
    stream = iter(source)
    started = time.monotonic()
    with pytest.raises(TaskNotReady, match="reading the spool"):
        next(stream)  # the first draw starts a read of the (empty) spool in the stream's thread
    assert stream.wait(timeout=10)
    with pytest.raises(TaskNotReady, match="no bundle is ready .* 0 handed out, 0 sessions staged"):
        next(stream)
    append(spool, session("a"), kept("a"), session("b"), kept("b"))
    for _ in range(20):  # within poll_s of that read: answered without reading or sleeping
        with pytest.raises(TaskNotReady, match="read again in 0\\.[0-4] s"):
            next(stream)
    assert not stream.reading and time.monotonic() - started < 0.3
    [bundle] = draw(stream)  # the next read, poll_s after the first, finds the sessions
    assert ids(bundle) == ["a", "b"] and time.monotonic() - started >= 0.4
    stream.close()
    assert not (tmp_path / "journal" / "reads").exists() or len(list((tmp_path / "journal" / "reads").iterdir())) == 1


def test_load_is_the_same_stream_for_a_caller_that_can_wait(tmp_path):
    tasks = taskset(tmp_path).load()
    spool = tmp_path / "spool" / "a.jsonl"
    append(spool, session("a"), kept("a"), session("b"), kept("b"))
    first = next(tasks)
    threading.Timer(0.3, lambda: append(spool, session("c"), kept("c"), session("d"), kept("d"))).start()
    second = next(tasks)  # sleeps poll_s between reads until c and d arrive
    tasks.close()
    assert [ids(first), ids(second)] == [["a", "b"], ["c", "d"]]


def test_a_restart_replays_the_journal_so_prime_rls_resume_skip_lands_on_the_first_untrained_bundle(tmp_path):
    spool = tmp_path / "spool"
    source = taskset(tmp_path)
    append(spool / "a.jsonl", *[r for i in range(6) for r in (session(f"s{i}"), kept(f"s{i}"))])
    stream = iter(source)
    drawn = [ids(t) for t in draw(stream, 3)]
    stream.close()  # the orchestrator dies; its last checkpoint counted 2 drawn tasks
    # New sessions and a retried upload of s0 arrive while it is down.
    append(spool / "b.jsonl", session("s0"), kept("s0"), session("s6"), kept("s6"), session("s7"), kept("s7"))

    resumed = iter(taskset(tmp_path))
    draw(resumed, 2)  # PRIME-RL's StandardSampler.load_state_dict: draw and discard `cursor` tasks
    after = draw(resumed, 2)
    assert ids(after[0]) == drawn[2] and after[0].key == "realtime-bundle-00000003"  # drawn after the checkpoint
    assert ids(after[1]) == ["s6", "s7"] and after[1].data.counts["duplicate_session"] == 1
    trained = [*drawn[:2], *map(ids, after)]
    flat = [s for bundle in trained for s in bundle]
    assert sorted(flat) == [f"s{i}" for i in range(8)]  # nothing lost, nothing twice
    resumed.close()
    state = json.loads((tmp_path / "journal" / "state.json").read_text())
    assert state["handed"] == 4 and state["totals"]["duplicate_session"] == 1 and state["totals"]["sessions"] == 8


def test_every_skip_is_counted_on_the_next_bundle_and_kept_in_the_journal(tmp_path):
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(runner_state(5)))
    source = taskset(
        tmp_path,
        state_file=str(state_file),
        staleness={"max_age": 2, "hard_max_age": 4},
        pii={"tokenizer": tiny_tokenizer()},
    )
    signal = kept("dup")
    append(
        tmp_path / "spool" / "a.jsonl",
        "not json",
        session("dup", version=5),
        signal,
        session("dup", version=5),
        signal,
        session("nolp", version=5, logprobs=False),
        session("old", version=1),
        kept("old"),
        session("future", version=9),
        kept("future"),
        session("quiet", version=5),
        session("pii", version=5, messages=[{"role": "user", "content": "mail me at a@b.example"}]),
        kept("pii"),
        session("ok", version=4),
        kept("ok"),
    )
    stream = iter(source)
    [bundle] = draw(stream)
    stream.close()
    assert ids(bundle) == ["dup", "ok"] and [e.age for e in bundle.data.sessions] == [0, 1]
    counts = bundle.data.counts
    assert counts["malformed"] == 1 and counts["duplicate_session"] == 1 and counts["duplicate_signal"] == 1
    assert counts["missing_logprobs"] == 1 and counts["stale_dropped"] == 1 and counts["future_version"] == 1
    assert counts["no_signal"] == 1 and counts["pii_dropped"] == 1 and counts["fresh"] == 2
    [read] = sorted((tmp_path / "journal" / "reads").iterdir())
    rejected = json.loads(read.read_text())["rejected"]
    assert {r["reason"] for r in rejected} == {"malformed", "duplicate_session", "duplicate_signal", "missing_logprobs"}
    assert all(r["length"] and r["sha256"] for r in rejected) and "not json" not in read.read_text()


def runner_state(version: int, step: int | None = None) -> dict:
    """The runner's state.json with one trainer step per shipped version (then `step`, when shipping was held)."""
    return {
        "version": version,
        "step": version if step is None else step,
        "version_steps": {str(v): v for v in range(version + 1)},
    }


def test_sessions_age_in_trainer_steps_while_shipping_is_held(tmp_path):
    """Shipping held at v1 while the trainer moves on: v1's sessions are not "age 0", they are as old as the steps
    trained since v1's weights."""
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(runner_state(1)))
    source = taskset(tmp_path, state_file=str(state_file), staleness={"max_age": 1, "hard_max_age": 4})
    append(tmp_path / "spool" / "a.jsonl", session("a", version=1), kept("a"), session("b", version=1), kept("b"))
    [bundle] = draw(iter(source))
    assert [e.age for e in bundle.data.sessions] == [0, 0]
    state_file.write_text(json.dumps(runner_state(1, step=3)))  # two steps trained, neither shipped
    append(tmp_path / "spool" / "a.jsonl", session("c", version=1), kept("c"), session("d", version=1), kept("d"))
    stream = iter(source)
    draw(stream)  # the journal's bundle replayed
    with pytest.raises(TaskNotReady):
        next(stream)
    stream.close()
    journal = json.loads((tmp_path / "journal" / "state.json").read_text())
    assert journal["totals"]["stale_dropped"] == 2  # age 2 > max_age 1: PRIME-RL's off-policy rule, in its own steps


def test_staged_sessions_are_aged_again_when_the_served_version_moves(tmp_path):
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(runner_state(0)))
    source = taskset(tmp_path, state_file=str(state_file), staleness={"max_age": 1})
    spool = tmp_path / "spool" / "a.jsonl"
    append(spool, session("a"), kept("a"))
    stream = iter(source)

    def ship_then_write():  # "a" waits for company while the runner ships two versions
        time.sleep(0.3)
        write_atomic(state_file, json.dumps(runner_state(2)))  # as the runner writes it: a reader never sees it torn
        append(spool, session("b", version=2), kept("b"), session("c", version=2), kept("c"))

    writer = threading.Thread(target=ship_then_write)
    writer.start()
    [bundle] = draw(stream)
    writer.join()
    stream.close()
    assert ids(bundle) == ["b", "c"] and bundle.data.counts["stale_dropped"] == 1


def test_one_reader_per_journal_and_a_broken_journal_is_refused(tmp_path):
    first = iter(taskset(tmp_path))
    append(tmp_path / "spool" / "a.jsonl", session("a"), kept("a"), session("b"), kept("b"))
    draw(first)
    with pytest.raises(RuntimeError, match="in use by another reader"):
        next(iter(taskset(tmp_path)))
    first.close()
    (tmp_path / "journal" / "bundles" / "00000001.json").unlink()
    with pytest.raises(FileNotFoundError, match="1 bundles were handed out but 00000001.json is missing"):
        next(iter(taskset(tmp_path)))


def test_importance_weighting_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ValidationError, match="use mode = 'drop' with the realtime-sessions source"):
        taskset(tmp_path, staleness={"mode": "importance_weight"})


def test_the_ids_resolve_to_the_taskset_its_env_and_the_replay_harness():
    from verifiers.v1.utils.loaders import default_harness_id, environment_class, harness_class, taskset_class

    from composer_prime.realtime.cycle.replay import ReplayEnv, ReplayHarness

    assert taskset_class("realtime-sessions") is RealtimeSessionsTaskset
    assert environment_class("realtime-sessions") is ReplayEnv
    assert harness_class("realtime-replay") is ReplayHarness
    assert default_harness_id("realtime-sessions") == "realtime-sessions"  # the replay harness by default too


def prime_rl_checkpoint(checkpoints: Path, step: int, cursor: int, name: str = "realtime") -> None:
    """A checkpoint as PRIME-RL 559b447's orchestrator writes it: `step_N/orchestrator/progress.pt`, its train source's
    sampler cursor inside (`orchestrator/ckpt.py`; `progress` is its `Progress` dataclass there)."""
    import torch

    path = checkpoints / f"step_{step}" / "orchestrator"
    path.mkdir(parents=True)
    state = {"rng": None, "envs": {name: {"sampler": {"cursor": cursor}, "gates": {}}}}
    torch.save({"progress": {"step": step}, "train_source": state}, path / "progress.pt")


def bundle_files(tmp_path: Path) -> list[int]:
    return sorted(int(p.stem) for p in (tmp_path / "journal" / "bundles").glob("*.json"))


def test_the_journal_forgets_bundles_below_prime_rls_oldest_kept_checkpoint_and_a_resume_still_lands_right(tmp_path):
    checkpoints, runner = tmp_path / "rl" / "checkpoints", tmp_path / "state.json"
    runner.write_text(json.dumps({"version": 0, "handed": 0}))
    spool = tmp_path / "spool" / "a.jsonl"
    source = taskset(tmp_path, checkpoints=str(checkpoints), state_file=str(runner))
    append(spool, *[r for i in range(10) for r in (session(f"s{i}"), kept(f"s{i}"))])
    stream = iter(source)
    drawn = [ids(t) for t in draw(stream, 5)]
    prime_rl_checkpoint(checkpoints, 2, cursor=2)
    prime_rl_checkpoint(checkpoints, 4, cursor=4)
    append(spool, session("s10"), kept("s10"), session("s11"), kept("s11"))
    draw(stream)  # a spool read: the runner has reported on nothing yet, so nothing is forgotten
    assert bundle_files(tmp_path) == [1, 2, 3, 4, 5, 6]
    runner.write_text(json.dumps({"version": 0, "handed": 3}))
    append(spool, session("s12"), kept("s12"), session("s13"), kept("s13"))
    draw(stream)
    assert bundle_files(tmp_path) == [3, 4, 5, 6, 7]  # the oldest checkpoint drew 2: every resume discards 1, 2
    shutil.rmtree(checkpoints / "step_2")  # PRIME-RL's keep_last = 1 deletes the older step dir
    runner.write_text(json.dumps({"version": 0, "handed": 7}))
    with pytest.raises(TaskNotReady):
        next(stream)  # the next read (in the stream's thread) forgets through the new oldest checkpoint's 4 draws
    stream.wait()
    assert bundle_files(tmp_path) == [5, 6, 7]
    stream.close()
    assert json.loads((tmp_path / "journal" / "state.json").read_text())["pruned"] == 4

    resumed = iter(taskset(tmp_path, checkpoints=str(checkpoints), state_file=str(runner)))
    discarded = draw(resumed, 4)  # PRIME-RL's resume from step_4: draw and discard 4 tasks
    assert all(t.data.pruned and not t.data.sessions for t in discarded)
    after = draw(resumed, 3)
    assert [ids(t) for t in after[:1]] == drawn[4:5] and after[0].key == "realtime-bundle-00000005"
    assert [ids(t) for t in after[1:]] == [["s10", "s11"], ["s12", "s13"]]
    resumed.close()


def test_pruning_is_crash_safe_and_a_journal_pruned_past_prime_rls_checkpoints_is_refused(tmp_path):
    checkpoints = tmp_path / "rl" / "checkpoints"
    append_to = tmp_path / "spool" / "a.jsonl"
    stream = iter(taskset(tmp_path, checkpoints=str(checkpoints)))
    append(append_to, *[r for i in range(6) for r in (session(f"s{i}"), kept(f"s{i}"))])
    draw(stream, 3)
    stream.close()
    # A crash after state.json recorded the floor, before the files went: the next open removes them.
    state_path = tmp_path / "journal" / "state.json"
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "pruned": 2}))
    prime_rl_checkpoint(checkpoints, 3, cursor=2)
    reopened = iter(taskset(tmp_path, checkpoints=str(checkpoints)))
    assert [t.data.pruned for t in draw(reopened, 3)] == [True, True, False]
    assert bundle_files(tmp_path) == [3]
    reopened.close()
    # PRIME-RL's checkpoints are gone (a fresh run) or older than the floor: placeholders would train, so refuse.
    shutil.rmtree(checkpoints / "step_3")
    with pytest.raises(RuntimeError, match=r"forgot bundles 1\.\.2 .* holds no checkpoint"):
        next(iter(taskset(tmp_path, checkpoints=str(checkpoints))))
    prime_rl_checkpoint(checkpoints, 1, cursor=1)
    with pytest.raises(RuntimeError, match="holds step_1, which drew only 1"):
        next(iter(taskset(tmp_path, checkpoints=str(checkpoints))))
    with pytest.raises(ValueError, match="checkpoint_env = 'other' is not a train source"):
        next(iter(taskset(tmp_path, checkpoints=str(checkpoints), checkpoint_env="other")))


def test_a_stream_collected_at_interpreter_exit_closes_quietly(tmp_path, monkeypatch):
    from composer_prime.realtime.ingest import source as module

    stream = iter(taskset(tmp_path))
    stream.worker = threading.Thread(target=lambda: None)
    stream.worker.start()
    monkeypatch.setattr(module, "threading", None)  # what module teardown leaves when the collector runs last
    stream.__del__()
