"""`composer-prime realtime` with `[prime_rl]`: the runner writes rl.toml, launches the train phase from its command
template (here a stand-in for `uv run rl` that loads the realtime-sessions taskset from that TOML and follows
PRIME-RL's draw / checkpoint / resume rules, tests/support/prime_rl_standin.py), judges and ships its newest
broadcast each cycle, stops it on exit, and resumes it from its checkpoint on the next run: every session trains
once across the restart.

How far PRIME-RL trains before the runner stops it is timing: a cycle judges the newest step there is when it looks
(polled each second), PRIME-RL goes on training while the cycle evaluates and ships, so the restarted runner's first
cycle may find a step written before the restart and newer than the one judged, ship it at once and stop PRIME-RL
before it has even loaded. That is the runner's contract (it ships the newest unjudged weights), so the test does not
assume how far either run got: it lets the train phase run once more on its own, from the checkpoint the runner left,
until every session it can see is trained, and then checks that each trained exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import tomli_w

from tests.support.tokenizer import tiny_tokenizer
from tests.unit.realtime.ingest.test_realtime_source import append, kept, session

STANDIN = Path(__file__).resolve().parents[2] / "support" / "prime_rl_standin.py"


def config(tmp_path: Path) -> Path:
    eval_script = tmp_path / "eval.py"
    eval_script.write_text("import sys\nprint('scoring', sys.argv[1])\nprint('{\"score\": 0.5}')\n")
    rl = {
        "orchestrator": {
            "train": {
                "source": [
                    {
                        "name": "realtime",
                        "group_size": 1,
                        "env": {
                            "taskset": {"id": "realtime-sessions", "bundle_size": 2, "poll_s": 0.1},
                            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
                        },
                    }
                ]
            }
        },
    }
    document = {
        "state_dir": str(tmp_path / "state"),
        "spool": {"dir": str(tmp_path / "spool"), "signal_window_s": 0},
        "pii": {"tokenizer": tiny_tokenizer()},
        "cadence": {"interval_min": 0},
        "eval": {"command": [sys.executable, str(eval_script), "{weights}"]},
        "prime_rl": {
            "command": [sys.executable, str(STANDIN), "{rl_toml}", "0.2"],
            "output_dir": str(tmp_path / "rl"),
            "step_wait_s": 60,
            "stop_timeout_s": 30,
            "rl": rl,
        },
    }
    toml = tmp_path / "realtime.toml"
    toml.write_text(tomli_w.dumps(document))
    return toml


def realtime(toml: Path, cycles: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "composer_prime", "realtime", "@", str(toml), "--cadence.cycles", str(cycles)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def drain(rl_toml: Path, run_dir: Path, sessions: set[str], timeout: float = 120.0) -> str:
    """Run the stand-in on the rl.toml the runner wrote until it has resumed (from the last checkpoint) and `sessions`
    are all in trained.jsonl, then stop it as the runner does; its output."""
    log = run_dir.parent / "drain.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, str(STANDIN), str(rl_toml), "0.2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if "resumed at step" in log.read_text() and sessions <= set(trained(run_dir)):
                break
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    return log.read_text()


def trained(run_dir: Path) -> list[str]:
    path = run_dir / "trained.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [s for line in lines for s in json.loads(line)["sessions"]]


def test_the_runner_drives_prime_rl_ships_its_steps_and_resumes_it_without_training_a_session_twice(tmp_path):
    (tmp_path / "spool").mkdir()
    append(
        tmp_path / "spool" / "a.jsonl",
        "broken line",
        *[r for i in range(6) for r in (session(f"s{i}"), kept(f"s{i}", i % 2 == 0))],
    )
    toml = config(tmp_path)
    first = realtime(toml, 1)
    assert first.returncode == 0, first.stderr[-3000:]
    state_dir, run_dir = tmp_path / "state", tmp_path / "rl" / "realtime"
    written = tomllib.loads((state_dir / "rl.toml").read_text())
    taskset = written["orchestrator"]["train"]["source"][0]["env"]["taskset"]
    assert taskset["spool"]["dir"] == str(tmp_path / "spool")
    assert taskset["journal"] == str(tmp_path / "rl" / "realtime-journal")
    assert taskset["state_file"] == str(state_dir.resolve() / "state.json") and "resume" not in written
    [report] = json.loads((state_dir / "state.json").read_text())["history"]
    assert report["shipped"] and report["version"] == 1 and report["heldout"] == 0.5
    assert report["counts"]["malformed"] == 1 and report["counts"]["sessions"] == 6 and report["episodes"] >= 2
    shipped = state_dir / "broadcasts" / "step_1"
    assert (shipped / "STABLE").exists()
    assert (shipped / "model.safetensors").read_text() == f"weights after step {report['train']['rl_step']}"
    log = (state_dir / "rl.log").read_text()
    assert "resumed at step 0 after 0 tasks" in log

    # A retried upload of s0 and two new sessions arrive while the runner is down.
    append(tmp_path / "spool" / "b.jsonl", *[r for s in ("s0", "s6", "s7") for r in (session(s), kept(s))])
    second = realtime(toml, 2)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resume" in tomllib.loads((state_dir / "rl.toml").read_text())
    state = json.loads((state_dir / "state.json").read_text())
    assert [r["cycle"] for r in state["history"]] == [1, 2] and state["version"] == 2
    assert state["history"][1]["train"]["rl_step"] > report["train"]["rl_step"]
    assert len(trained(run_dir)) == len(set(trained(run_dir)))  # however far it got: nothing twice
    out = drain(state_dir / "rl.toml", run_dir, {f"s{i}" for i in range(8)})
    assert "resumed at step" in out and "after 0 tasks" not in out, out
    assert sorted(trained(run_dir)) == [f"s{i}" for i in range(8)]  # each session once, across the restarts
    journal = json.loads((tmp_path / "rl" / "realtime-journal" / "state.json").read_text())
    assert journal["totals"]["duplicate_session"] == 1 and journal["handed"] == 4


def test_prime_rl_exiting_stops_the_runner_with_its_status_and_log(tmp_path):
    (tmp_path / "spool").mkdir()
    toml = config(tmp_path)
    document = tomllib.loads(toml.read_text())
    document["prime_rl"]["command"] = [sys.executable, "-c", "import sys; print('no GPUs here'); sys.exit(3)"]
    toml.write_text(tomli_w.dumps(document))
    result = realtime(toml, 1)
    assert result.returncode == 1
    assert "PRIME-RL exited with status 3" in result.stderr and "no GPUs here" in result.stderr
    assert "a restart of the runner resumes it from its last checkpoint" in result.stderr


def test_the_runner_and_the_taskset_reopen_a_journal_holding_pending_sessions_and_early_signals(tmp_path):
    (tmp_path / "spool").mkdir()
    append(
        tmp_path / "spool" / "a.jsonl",
        *[r for i in range(2) for r in (session(f"s{i}", ago=7200), kept(f"s{i}"))],
        session("pending", ago=5),
        kept("pending"),
        kept("not-yet"),
    )
    toml = config(tmp_path)
    document = tomllib.loads(toml.read_text())
    document["spool"]["signal_window_s"] = 3600
    toml.write_text(tomli_w.dumps(document))
    first = realtime(toml, 1)
    assert first.returncode == 0, first.stderr[-3000:]
    journal = json.loads((tmp_path / "rl" / "realtime-journal" / "state.json").read_text())
    assert list(journal["cursor"]["pending"]) == ["pending"] and "not-yet" in journal["cursor"]["signals"]
    append(
        tmp_path / "spool" / "b.jsonl", *[r for i in range(2, 4) for r in (session(f"s{i}", ago=7200), kept(f"s{i}"))]
    )
    second = realtime(toml, 2)  # the restarted runner reads the journal; the resumed taskset reopens it
    assert second.returncode == 0, second.stderr[-3000:]
    state = json.loads((tmp_path / "state" / "state.json").read_text())
    assert [r["cycle"] for r in state["history"]] == [1, 2]
    assert "Traceback" not in (tmp_path / "state" / "rl.log").read_text()
