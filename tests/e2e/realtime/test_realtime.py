"""`composer-prime realtime` end to end on the CPU demo: simulated users with known taste, the tiny policy served
from what the loop ships, real spool files, real checkpoints; a run killed mid-cycle resumes without losing or
double-training a session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DEMO = ["--demo.sessions", "32", "--cadence.interval-min", "0", "--cadence.steps", "4"]
"""docs/realtime.md's command: the trainer's default lr (1e-4)."""
SMALL = [*DEMO, "--demo.sessions", "10", "--cadence.min-episodes", "4", "--cadence.steps", "2"]
"""Fewer sessions and steps where the test is about durability, not learning."""


def realtime(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "composer_prime", "realtime", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("realtime-demo")
    result = realtime(
        "--state-dir", str(root / "state"), "--spool.dir", str(root / "spool"), "--cadence.cycles", "6", *DEMO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_the_users_reward_rises_over_cycles_and_every_version_ships(demo_run):
    state = json.loads((demo_run / "state" / "report.json").read_text())
    cycles = state["history"]
    assert [c["cycle"] for c in cycles] == [1, 2, 3, 4, 5, 6]
    rewards = [c["user_reward"] for c in cycles]
    assert sum(rewards[-3:]) / 3 > rewards[0] + 0.25, rewards
    # Held-out samples the trained policy on functions never in the spool, judged by the users' hidden tests: the
    # taste and the behaviour are learned, not a prefix that pleases a string check.
    assert cycles[-1]["heldout"] > cycles[0]["heldout_served"] + 0.2, [c["heldout"] for c in cycles]
    assert state["version"] == sum(c["shipped"] for c in cycles) >= 4
    for v in range(1, state["version"] + 1):
        assert (demo_run / "state" / "broadcasts" / f"step_{v}" / "STABLE").exists()
        weights = demo_run / "state" / "broadcasts" / f"step_{v}" / "model.safetensors"
        assert weights.stat().st_mode & 0o044 == 0o044  # readable by the relay origin and the servers
    counts = cycles[0]["counts"]
    for reason in ("duplicate_session", "malformed", "missing_logprobs", "pii_dropped"):
        assert counts[reason] == 1, counts
    assert any(c["counts"].get("stale_dropped") for c in cycles)  # the lagging replica's sessions past max_age
    # Only the checkpoint state.json resumes from is kept (each is about 8x the model: weights and optimizer).
    assert [p.parent.name for p in (demo_run / "state" / "cycles").glob("*/checkpoint")] == ["000006"]
    assert state["checkpoint"] == "cycles/000006/checkpoint"


def test_a_demo_of_another_population_is_refused_in_the_state_dir_of_the_first(demo_run):
    result = realtime(
        "--state-dir",
        str(demo_run / "state"),
        "--spool.dir",
        str(demo_run / "spool"),
        "--cadence.cycles",
        "7",
        "--demo.population",
        "hack",
        *DEMO,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "warm-started for population 'honest'" in result.stderr and "pass --state-dir" in result.stderr
    assert json.loads((demo_run / "state" / "report.json").read_text())["cycle"] == 6  # nothing ran


def test_the_hack_population_fires_the_monitor_quarantines_its_sessions_and_nothing_ships(tmp_path):
    """carol keeps whatever turns her test run green, and a third of the warm start deletes her asserts: each cycle
    the `edits_disable_tests` monitor fires, her rewarded hacks never train, and no version ships."""
    result = realtime(
        "--state-dir",
        str(tmp_path / "state"),
        "--spool.dir",
        str(tmp_path / "spool"),
        "--cadence.cycles",
        "3",
        "--demo.population",
        "hack",
        *DEMO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "state" / "report.json").read_text())
    cycles = state["history"]
    assert all(c["hack_share"] > 0 for c in cycles)  # the served policy keeps answering with the hack
    for c in cycles:
        assert [(a["monitor"], a["pause"]) for a in c["alerts"]] == [("edits_disable_tests", True)], c["alerts"]
        assert c["train"] is not None and not c["shipped"]
    assert sum(c["counts"].get("quarantined", 0) for c in cycles) >= 3
    assert state["version"] == 0 and not (tmp_path / "state" / "broadcasts" / "step_1").exists()
    for batch in sorted((tmp_path / "state" / "cycles").glob("*/batch.json")):
        episodes = json.loads(batch.read_text())["episodes"]
        assert episodes and not [e for e in episodes if e["disabled_tests"] and e["reward"] > -1]
        assert [e for e in episodes if e["disabled_tests"]]  # hacks at -1 (alice's, bob's) do train: against it


def trained_ids(state_dir: Path) -> list[str]:
    ids = []
    for batch in sorted((state_dir / "cycles").glob("*/batch.json")):
        data = json.loads(batch.read_text())
        if data["train"]:
            ids += [e["session_id"] for e in data["episodes"]]
    return ids


def test_a_run_killed_mid_cycle_resumes_without_loss_or_double_training(demo_run, tmp_path):
    args = [
        "--state-dir",
        str(tmp_path / "state"),
        "--spool.dir",
        str(tmp_path / "spool"),
        "--model-dir",
        str(demo_run / "state" / "policy-v0"),
        "--cadence.cycles",
        "3",
        *SMALL,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "composer_prime", "realtime", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = tmp_path / "state" / "cycles" / "000002" / "batch.json"
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # mid cycle 2: its batch is read, its checkpoint not yet committed
    proc.wait(timeout=30)
    assert marker.exists() and not (tmp_path / "state" / "cycles" / "000002" / "report.json").exists()
    result = realtime(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "state" / "report.json").read_text())
    assert [c["cycle"] for c in state["history"]] == [1, 2, 3]
    ids = trained_ids(tmp_path / "state")
    assert len(ids) == len(set(ids))
    read = sum(c["counts"].get("sessions", 0) for c in state["history"])
    left_out = sum(c["counts"].get(k, 0) for c in state["history"] for k in ("stale_dropped", "pii_dropped"))
    assert read == len(ids) + left_out  # every session read was trained once or counted out
    assert not list((tmp_path / "state" / "cycles").glob("*/.checkpoint.tmp"))


def test_a_second_runner_on_the_same_state_dir_is_refused(tmp_path):
    from filelock import FileLock

    (tmp_path / "spool").mkdir()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "state").mkdir()
    with FileLock(str(tmp_path / "state" / "state.lock")):
        result = realtime(
            "--state-dir",
            str(tmp_path / "state"),
            "--spool.dir",
            str(tmp_path / "spool"),
            "--model-dir",
            str(tmp_path / "model"),
            timeout=60,
        )
    assert result.returncode == 1 and "is in use by another" in result.stderr


def test_bad_settings_name_the_field_and_the_fix(tmp_path):
    result = realtime("--state-dir", str(tmp_path / "s"), timeout=60)
    assert result.returncode == 2 and "model_dir is unset and demo is off" in result.stderr
    result = realtime("--demo.sessions", "4", "--staleness.max-age", "3", "--staleness.hard-max-age", "1", timeout=60)
    assert result.returncode == 2 and "hard_max_age = 1 is below max_age = 3" in result.stderr
    result = realtime("--model-dir", str(tmp_path), "--spool.dir", str(tmp_path / "none"), timeout=60)
    assert result.returncode == 2 and "spool.dir" in result.stderr and "does not exist" in result.stderr


def test_versions_ship_through_the_relay_bit_exact(demo_run, tmp_path):
    from tests.support.relay_procs import start_client, start_origin
    from tests.support.vllm_admin import AdminStandIn, dir_digests

    state = tmp_path / "state"
    args = [
        "--state-dir",
        str(state),
        "--spool.dir",
        str(tmp_path / "spool"),
        "--model-dir",
        str(demo_run / "state" / "policy-v0"),
        *SMALL,
    ]
    first = realtime(*args, "--cadence.cycles", "1")  # writes broadcasts/step_0 (and ships v1 locally)
    assert first.returncode == 0, first.stderr[-3000:]
    origin, origin_url = start_origin(state, tmp_path / "origin", tmp_path / "origin.log")
    with origin, AdminStandIn() as vllm:
        client, proxy = start_client(origin_url, vllm.url, tmp_path / "store", tmp_path / "client.log")
        with client:
            token = tmp_path / "keys" / "admin.token"  # the token start_client gave the proxy
            result = realtime(
                *args, "--cadence.cycles", "2", "--ship.admin-urls", proxy, "--ship.admin-token-file", str(token)
            )
            assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((state / "report.json").read_text())
    shipped = [c["version"] for c in report["history"][1:] if c["shipped"]]
    assert shipped, "no cycle shipped"
    updates = vllm.updates()
    assert [Path(u.body["weight_dir"]).name for u in updates] == [f"step_{v}" for v in shipped]
    for update, version in zip(updates, shipped, strict=True):
        assert update.files == dir_digests(state / "broadcasts" / f"step_{version}")
    assert [c.path.split("?")[0] for c in vllm.calls if c.method == "POST"][:3] == [
        "/pause",
        "/update_weights",
        "/resume",
    ]


def live_session(sid: str, reward_up: bool, disable_tests: bool = False) -> list[str]:
    """A product's session (token ids inside the tiny policy's vocabulary) and its thumbs signal."""
    path = "tests/test_m.py" if disable_tests else "m.py"
    edit = {
        "name": "str_replace",
        "arguments": json.dumps({"path": path, "old_str": "    assert f() == 1", "new_str": "    pass"}),
    }
    ended = time.time() - 7200
    session = {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "policy_version": 0,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 60,
        "ended_at": ended,
        "messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": edit}]}],
        "branches": [
            {
                "segments": [
                    {"token_ids": list(range(1, 12)), "sampled": False},
                    {"token_ids": [30, 31, 32, 33], "sampled": True, "logprobs": [-1.0, -2.0, -1.5, -0.5]},
                ]
            }
        ],
    }
    thumbs = {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": ended + 60,
        "signal": {"type": "thumbs", "up": reward_up},
    }
    return [json.dumps(session), json.dumps(thumbs)]


def test_monitors_and_the_heldout_gate_hold_the_ship_on_a_product_spool(demo_run, tmp_path):
    spool, state, score = tmp_path / "spool", tmp_path / "state", tmp_path / "score.txt"
    spool.mkdir()
    score.write_text("0.5")
    scorer = (
        "import json, sys, pathlib; assert (pathlib.Path(sys.argv[1]) / 'model.safetensors').exists(); "
        "print('evaluating'); print(json.dumps({'score': float(open(sys.argv[2]).read())}))"
    )
    args = [
        "--state-dir",
        str(state),
        "--spool.dir",
        str(spool),
        "--model-dir",
        str(demo_run / "state" / "policy-v0"),
        "--cadence.min-episodes",
        "4",
        "--cadence.steps",
        "1",
        "--cadence.interval-min",
        "0",
        "--staleness.max-age",
        "0",
        "--staleness.mode",
        "importance_weight",
        "--eval.command",
        json.dumps([sys.executable, "-c", scorer, "{weights}", str(score)]),
    ]

    def cycle(n: int, lines: list[str]) -> dict:
        (spool / f"{n}.jsonl").write_text("\n".join(lines) + "\n")
        result = realtime(*args, "--cadence.cycles", str(n), timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads((state / "report.json").read_text())

    honest = [line for k in range(4) for line in live_session(f"a{k}", reward_up=k % 2 == 0)]
    report = cycle(1, honest)
    assert report["history"][0]["shipped"] and report["version"] == 1 and report["history"][0]["heldout"] == 0.5
    hacked = [line for k in range(4) for line in live_session(f"b{k}", reward_up=k < 3, disable_tests=k < 2)]
    report = cycle(2, hacked)
    second = report["history"][1]
    assert [a["monitor"] for a in second["alerts"]] == ["edits_disable_tests"] and second["alerts"][0]["pause"]
    assert not second["shipped"] and report["version"] == 1
    # The two rewarded hacks are quarantined, not trained: the two left are too few to train, and carry over.
    assert second["counts"]["quarantined"] == 2 and second["train"] is None and second["episodes"] == 2
    batch = json.loads((state / "cycles" / "000002" / "batch.json").read_text())
    assert sorted(e["session_id"] for e in batch["episodes"]) == ["b2", "b3"]
    score.write_text("0.3")  # held-out falls below the served version's 0.5 by more than gates.heldout_max_drop
    report = cycle(3, [line for k in range(4) for line in live_session(f"c{k}", reward_up=k % 2 == 0)])
    third = report["history"][2]
    assert not third["gate_heldout"] and not third["shipped"] and report["version"] == 1
    assert not (state / "broadcasts" / "step_2").exists()
    # Served v1 now, the sessions came from v0: past max_age 0, trained importance-weighted (weight in (0, 1]).
    assert third["counts"]["stale_weighted"] == 4 and third["episodes"] == 6
    assert 0 < third["train"]["importance_weight_mean"] <= 1 and third["train"]["importance_weighted"] == 6
    # Staleness in trainer steps: v1 was trained to step 1, and one more step trained while shipping was held.
    assert report["step"] == 2 and report["version_steps"] == {"0": 0, "1": 1} and third["trainer_step"] == 2


def one_cycle_of_four_sessions(demo_run: Path, tmp_path: Path) -> list[str]:
    """The arguments of a one-cycle, one-step run from the demo's first policy over a spool of four live sessions."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_text("\n".join(x for k in range(4) for x in live_session(f"a{k}", k % 2 == 0)) + "\n")
    return [
        "--state-dir",
        str(tmp_path / "state"),
        "--spool.dir",
        str(spool),
        "--model-dir",
        str(demo_run / "state" / "policy-v0"),
        "--cadence.min-episodes",
        "4",
        "--cadence.steps",
        "1",
        "--cadence.cycles",
        "1",
    ]


def test_an_unreachable_relay_stops_the_run_clearly_and_the_rerun_ships(demo_run, tmp_path):
    from composer_prime.process.ports import free_port

    args = one_cycle_of_four_sessions(demo_run, tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    result = realtime(*args, "--ship.admin-urls", dead, "--ship.timeout-s", "5", timeout=120)
    assert (
        result.returncode == 1 and f"{dead}/pause did not answer" in result.stderr and "Traceback" not in result.stderr
    )
    assert (tmp_path / "state" / "cycles" / "000001" / "checkpoint").is_dir()
    result = realtime(*args, timeout=120)  # the trained checkpoint is reused; only the ship is repeated
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "state" / "report.json").read_text())
    assert report["version"] == 1 and (tmp_path / "state" / "broadcasts" / "step_1" / "STABLE").exists()


def test_a_cursor_holding_pending_sessions_and_early_signals_reads_back_on_the_next_cycle_and_restart(
    demo_run, tmp_path
):
    """The production case: a signal window long enough that sessions wait in the cursor, and a signal whose session
    has not arrived, across cycles of one run and a restart."""
    spool = tmp_path / "spool"
    spool.mkdir()
    old = [line for k in range(4) for line in live_session(f"a{k}", k % 2 == 0)]
    recent = json.loads(live_session("r0", True)[0]) | {"ended_at": time.time() - 5, "started_at": time.time() - 60}
    early = json.loads(live_session("later", True)[1])
    (spool / "a.jsonl").write_text("\n".join([*old, json.dumps(recent), json.dumps(early)]) + "\n")
    args = [
        "--state-dir",
        str(tmp_path / "state"),
        "--spool.dir",
        str(spool),
        "--model-dir",
        str(demo_run / "state" / "policy-v0"),
        "--cadence.min-episodes",
        "1",
        "--cadence.steps",
        "1",
        "--cadence.interval-min",
        "0",
        "--spool.signal-window-s",
        "3600",
    ]
    result = realtime(*args, "--cadence.cycles", "2", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    batch = json.loads((tmp_path / "state" / "cycles" / "000002" / "batch.json").read_text())
    assert list(batch["cursor"]["pending"]) == ["r0"] and list(batch["cursor"]["signals"]) == ["later"]
    assert "tool_calls" not in json.dumps(batch)  # the pending session is a place in the spool, not a copy
    first = json.loads((tmp_path / "state" / "cycles" / "000001" / "batch.json").read_text())
    assert first["train"] and all(e["samples"] == [] for e in first["episodes"])  # trained: its tokens forgotten
    (spool / "b.jsonl").write_text(live_session("later", True)[0] + "\n")  # the early signal's session arrives
    result = realtime(*args, "--cadence.cycles", "3", timeout=120)  # a restart reads the cursor back
    assert result.returncode == 0, result.stderr[-3000:]
    third = json.loads((tmp_path / "state" / "cycles" / "000003" / "batch.json").read_text())
    assert [(e["session_id"], e["signals"]) for e in third["episodes"]] == [("later", ["thumbs"])]
    assert list(third["cursor"]["pending"]) == ["r0"]


def test_a_full_disk_stops_the_run_with_a_clear_error_and_the_rerun_resumes(demo_run, tmp_path):
    import resource

    args = one_cycle_of_four_sessions(demo_run, tmp_path)
    limit = 64 * 1024  # the batch fits, the weights do not: what a disk filling up mid-cycle does to a write

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        [sys.executable, "-m", "composer_prime", "realtime", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=small_disk,
    )
    assert result.returncode == 1 and "cannot write" in result.stderr and "free space" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not list((tmp_path / "state").rglob(".*.tmp"))  # nothing half-written left to look complete
    result = realtime(*args, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "state" / "report.json").read_text())["version"] == 1


def test_the_importance_weight_mean_is_over_the_stale_sessions_only(demo_run):
    from composer_prime.realtime.cycle.policy import Policy
    from composer_prime.realtime.cycle.trainer import TrainerConfig
    from composer_prime.realtime.ingest.join import Episode, EpisodeSample

    def episode(sid: str, weighted: bool, logprob: float) -> Episode:
        ids = list(range(1, 12)) + [30, 31, 32, 33]
        sample = EpisodeSample(token_ids=ids, mask=[False] * 11 + [True] * 4, logprobs=[0.0] * 11 + [logprob] * 4)
        return Episode(
            session_id=sid,
            user="u",
            group="",
            policy_version=0,
            age=3 if weighted else 0,
            reward=1.0,
            signals=["thumbs"],
            importance_weighted=weighted,
            advantage=0.5,
            sampled_tokens=4,
            samples=[sample],
        )

    policy = Policy(demo_run / "state" / "policy-v0", TrainerConfig(), {})
    episodes = [episode("fresh0", False, -1.0), episode("fresh1", False, -1.0), episode("stale", True, -0.01)]
    expected = policy.weight(episodes[2], 1.0)  # served with near-certainty: pi_now / pi_served is well below 1
    assert expected < 0.5
    [figures] = policy.train(episodes, 1, 1.0)
    assert figures["importance_weight_mean"] == pytest.approx(expected) and figures["importance_weighted"] == 1.0
