"""`composer-prime smoke --steps 1` as a user runs it: a real subprocess, real servers on 127.0.0.1, real rollouts,
a real optimizer step and a real relay. The report must show every stage at work, and bad input must get a clear
error, not a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM = importlib.util.find_spec("vllm") is not None


def smoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "composer_prime", "smoke", *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_one_step_shows_every_stage(tmp_path):
    out = tmp_path / "smoke"
    # the three channels are on by default, as in the launch configs
    result = smoke("--steps", "1", "--group-size", "6", "--out", str(out), "--no-live")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    tasks = report["setup"]["tasks"]
    assert len(tasks) == 2 and all(t.startswith("toyrepo:minicalc/") and "::" in t for t in tasks)  # two functions
    assert report["setup"]["warm_start"]["loss"] < 0.05
    # vLLM where it is installed, else the stand-in, named with the reason (tests/e2e/test_smoke_vllm.py: vLLM)
    inference = report["setup"]["inference"]
    assert inference["server"] == ("vllm" if VLLM else "stand-in")
    assert VLLM or inference["reason"].startswith("stand-in: vllm not installed")
    assert inference["reloads"] == 1
    [step] = report["steps"]
    # rollouts: G=6 per task, through verifiers, graded by the hidden tests: some pass, some fail, some compact
    # A rollout whose sampled output the interception cannot parse (the tiny model writes `"name": {...}`) ends in
    # an error and is not trained on; the report counts it under stop/error.
    assert step["rollouts"] == 12 and step["failed_rollouts"] <= 2
    assert step.get("stop/error", 0.0) == step["failed_rollouts"]
    assert step["passed"] >= 1 and step["failed"] >= 1
    assert 0 < step["reward_mean"] < 1
    assert step["compacted"] >= 1
    assert step["tool_calls"] > 0
    # teachers: verdicts through the teacher hook, priced
    assert step["teacher_verdicts"] > 0 and step["teacher_cost_usd"] > 0
    # algorithm: hint targets prefill-scored on the policy server, replay credit from the verdicts
    assert step["hint_targets"] >= 1 and step["hint_tokens"] >= 1
    assert step["replay_steps"] >= 1
    # trainer: composer_loss with all three channels active
    assert step["rl_tokens"] > 0 and step["samples"] >= step["rollouts"] - step["failed_rollouts"]
    assert step["composer/rl/pg_loss"] != 0
    assert step["composer/hint/loss"] != 0 and step["composer/hint/token_frac"] > 0
    assert step["composer/drift/log_ratio_sq"] > 0
    assert step["grad_norm"] > 0
    # the loss split into its channels adds up to the loss; shares of the hint and replay signals
    assert step["loss/pg"] + step["loss/hint"] + step["loss/kl"] == pytest.approx(step["loss"], rel=1e-6, abs=1e-9)
    assert step["loss/hint"] != 0 and step["loss/kl"] > 0
    assert 0 < step["hint_share"] < 1 and 0 < step["replay_share"] <= 1
    # why rollouts ended, counted once per rollout; compaction shrinks the context
    stops = {k: v for k, v in step.items() if k.startswith("stop/")}
    assert sum(stops.values()) == 12 and set(stops) <= {"stop/finish", "stop/text_reply", "stop/max_turns",
                                                        "stop/context_overflow", "stop/compaction_failed",
                                                        "stop/stopped", "stop/error"}  # fmt: skip
    assert step["compaction_before_tokens"] > step["compaction_after_tokens"] > 0
    # weights: a delta through the relay, a reload that changed the server's logprobs
    assert 0 < step["delta_bytes"] < step["checkpoint_bytes"]
    assert 0 < step["changed_fraction"] < 1
    assert step["logprob_change"] > 0
    assert step["reload_ms"] > 0
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rollouts and teachers" in result.stdout and "algorithm and loss" in result.stdout
    assert "why rollouts ended" in result.stdout
    assert (out / "work" / "trainer" / "broadcasts" / "step_1" / "STABLE").exists()
    # the server now runs the step the relay client rebuilt, not the trainer's copy
    assert report["served_weights"] == [str(out / "work" / "relay-client" / "steps" / "step_1")]
    assert (out / "work" / "relay-client" / "steps" / "step_1" / "model.safetensors").exists()


@pytest.mark.slow
def test_the_same_seed_gives_the_same_run(tmp_path):
    """Concurrent rollouts reach the server in a different order each run; per-rollout seeds make that not matter.
    Two steps, so the second samples from the reloaded weights."""
    args = ("--steps", "2", "--tasks", "1", "--group-size", "3", "--no-live")
    reports = []
    for name in ("a", "b"):
        result = smoke(*args, "--out", str(tmp_path / name))
        assert result.returncode == 0, result.stderr[-3000:]
        reports.append(json.loads((tmp_path / name / "report.json").read_text()))
    keys = ("reward_mean", "passed", "hint_targets", "hint_tokens", "replay_steps", "loss", "loss/pg", "loss/hint",
            "rl_tokens", "delta_bytes", "changed_fraction")  # fmt: skip
    first, second = ([{k: row[k] for k in keys} for row in r["steps"]] for r in reports)
    assert first == second
    for name in ("a", "b"):  # the traces too, token for token
        assert (tmp_path / name / "work" / "traces-step2.jsonl").exists()
    traces = [[json.loads(line) for line in (tmp_path / n / "work" / "traces-step2.jsonl").read_text().splitlines()]
              for n in ("a", "b")]  # fmt: skip
    tokens = [[[node["token_ids"] for node in t["nodes"]] for t in run] for run in traces]
    assert tokens[0] == tokens[1]


def test_bad_flag_values_name_the_flag(tmp_path):
    result = smoke("--tasks", "9", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--tasks\n  Input should be less than or equal to 4 (got '9')" in result.stderr
    assert "Traceback" not in result.stderr
    result = smoke("--teacher-url", "api.example.com", "--teacher-model", "m", "--out", str(tmp_path))
    assert result.returncode == 2 and "is not an http(s) URL" in result.stderr
    result = smoke("--teacher-url", "https://api.example.com/v1", "--out", str(tmp_path))
    assert result.returncode == 2 and "give both (--teacher-url URL --teacher-model NAME)" in result.stderr


def test_port_in_use_and_foreign_out_dir_are_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = smoke("--port", str(port), "--out", str(tmp_path))
    assert result.returncode == 2
    assert f"--port = {port}: the port is in use on 127.0.0.1" in result.stderr
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "mine.txt").write_text("keep me")
    result = smoke("--out", str(tmp_path))
    assert result.returncode == 2 and "is not a smoke work dir" in result.stderr
    assert (tmp_path / "work" / "mine.txt").read_text() == "keep me"


@pytest.mark.skipif(VLLM, reason="vllm is installed here")
def test_vllm_asked_for_but_not_installed_is_refused(tmp_path):
    result = smoke("--inference", "vllm", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "--inference = vllm: vllm is not installed in this environment" in result.stderr
    assert "pip install -e '.[vllm]'" in result.stderr and "--inference auto" in result.stderr
    assert not (tmp_path / "work").exists()  # refused before anything ran


def test_missing_dependency_names_the_install_command(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from composer_prime.cli import main; "
        f"sys.exit(main(['smoke', '--out', {str(tmp_path)!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)  # fmt: skip
    assert result.returncode == 2
    assert "smoke: missing matplotlib. Install them from the composer-prime checkout with: pip install" in result.stderr
    assert "'.[smoke,vllm]' -e environments/feature_deletion && pip uninstall -y torchvision" in result.stderr
