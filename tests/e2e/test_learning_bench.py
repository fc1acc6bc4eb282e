"""bench/learning.py at tiny scale, as a user runs it: a real subprocess, its table, JSON and PNG outputs.

It checks what the bench is for: every arm trains through the project's algorithm, and the arms differ in what is
trained (GRPO and replay carry no hint tokens, the hint arms do, whole-completion hints target more tokens than
targeted hints, one target per trace fewer than four), so a table row is never two names for the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


ARMS = ("grpo", "hints", "replay", "full", "whole", "opsd", "full-targets1", "full-targets4")


def _bench(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "learning.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PRIME_RL_SRC": ""},
    )


@pytest.mark.slow
def test_learning_bench_tiny_writes_table_and_curves(tmp_path):
    out = tmp_path / "learning"
    done = _bench("--preset", "tiny", "--workers", "1", "--arms", ",".join(ARMS), "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (out / "table.md").read_text()
    assert "| gru | 47,631 |" in summary and "| qwen-xs | 7,520 |" in summary  # one row per size, with its parameters
    for size in ("gru", "qwen-xs"):
        table = (out / size / "table.md").read_text()
        for arm in ARMS:
            assert f"| {arm} |" in table
        assert (out / size / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        results = json.loads((out / size / "results.json").read_text())
        assert results["settings"]["size"] == size
        assert len(results["warm_start"]) == 2 and len(results["runs"]) == 2 * len(ARMS)
        steps = results["settings"]["hint_drill" if size == "gru" else "pretrain"]
        assert 0 < results["base"]["steps"] <= steps  # a transformer stops pretraining once it reads a hint
        for warm in results["warm_start"]:
            reading = warm["hint_reading"]
            assert set(reading) == {
                "no_hint",
                "right_hint",
                "wrong_hint",
                "follows_wrong_hint",
                "pass_no_hint",
                "pass_right_hints",
            }
            assert all(0.0 <= v <= 1.0 for v in reading.values())
        assert "Hint reading of the warm start" in table and "at temperature 1," in table
        share: dict[str, float] = {}
        prefill: dict[str, float] = {}
        for run in results["runs"]:
            assert len(run["curve"]) == results["settings"]["steps"] + 1
            assert all(0.0 <= acc <= 1.0 for _, acc in run["curve"])
            totals = run["totals"]
            assert totals["rl_tokens"] > 0 and totals["rollout_tokens"] >= totals["rl_tokens"]
            share[run["arm"]] = share.get(run["arm"], 0.0) + totals["hint_tokens"] / totals["rl_tokens"]
            prefill[run["arm"]] = prefill.get(run["arm"], 0.0) + totals["prefill_tokens"]
            assert (totals["prefill_passes"] > 0) == (totals["prefill_requests"] > 0)
        assert share["grpo"] == 0.0 and share["replay"] == 0.0 and prefill["grpo"] == prefill["replay"] == 0.0
        assert share["hints"] > 0 and share["full"] > 0 and prefill["hints"] > 0
        assert share["whole"] > share["hints"]
        # the OPSD-style arm distils every step of a trace under the whole solution: the most hint tokens of all (the
        # tiny preset's traces all fail, so this does not tell it from an arm that skips solved traces)
        assert share["opsd"] >= max(share.values()) and share["opsd"] > share["whole"]
        assert share["full-targets1"] < share["full-targets4"]
        # the same warm start and prompts: every arm of a seed starts from the same accuracy
        starts = {(r["seed"], r["curve"][0][1]) for r in results["runs"]}
        assert len(starts) == 2
        assert results["runs"][0]["loss"] == "composer_loss (no reference stream)"


@pytest.mark.slow
def test_a_rerun_reuses_every_cached_result_exactly(tmp_path):
    out, cache = tmp_path / "first", tmp_path / "cache"
    args = ["--preset", "tiny", "--sizes", "qwen-xs", "--seeds", "1", "--arms", "grpo,opsd", "--cache", str(cache)]
    first = _bench(*args, "--workers", "1", "--out", str(out))
    assert first.returncode == 0, first.stderr[-3000:]
    files = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert {p.name.split("-")[0] for p in files} == {"base", "warm", "rl"} and len(files) == 4
    again = _bench(*args, "--workers", "2", "--out", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == files  # nothing recomputed
    runs = [json.loads((d / "qwen-xs" / "results.json").read_text())["runs"] for d in (out, tmp_path / "again")]
    assert runs[0] == runs[1]
    # another setting is another key: a changed preset value computes (and caches) its own runs
    other = _bench(*args, "--steps", "2", "--workers", "1", "--out", str(tmp_path / "other"))
    assert other.returncode == 0, other.stderr[-3000:]
    # ... and reuses the base and the warm start, which do not depend on the RL settings
    assert len([p for p in cache.rglob("rl-*") if p.is_file()]) == 4
    assert len([p for p in cache.rglob("*.pt") if p.is_file()]) == 2


def test_learning_bench_rejects_an_unknown_arm(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "learning.py"), "--arms", "grpo,nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "unknown arm(s) ['nope']" in done.stderr and "Traceback" not in done.stderr


def _task():
    sys.path.insert(0, str(ROOT / "bench"))
    import learning_task

    return learning_task


def test_verifier_fails_an_episode_whose_wrong_steps_cancel_out():
    task = _task()
    problem = task.Problem(8, (("+", 4), ("-", 1)))  # 08+4=12, 12-1=11
    assert task.verify(problem, ["08+4=12", "12-1=11"]) == 1.0
    # the last result is the true 11, but both written steps are wrong: a reward here trains wrong arithmetic
    assert task.verify(problem, ["08+4=10", "10-1=11"]) == 0.0
    assert task.verify(problem, ["08+4=12", "12-1=12"]) == 0.0
    assert task.verify(problem, ["08+4=12", "12-1=1x"]) == 0.0


@pytest.mark.parametrize("size", ["gru", "qwen-xs"])
def test_trainer_logprobs_match_sampling_logprobs_at_the_sampling_temperature(size):
    # the transformer samples through its KV cache and trains on whole padded rows: both must give the same logprobs
    import random

    import torch

    task = _task()
    import learning_policy

    torch.manual_seed(0)
    policy = task.Policy(16, 1) if size == "gru" else learning_policy.make_policy(learning_policy.SIZES[size], "cpu")
    rng = random.Random(0)
    problems = [task.sample_problem(rng, 3)] * 6
    for temperature in (0.5, 1.0):
        episodes = task.rollout(policy, problems, False, torch.Generator().manual_seed(1), temperature)
        for episode in episodes:
            ids = [t for _, message in episode.messages for t in message]
            trainer = policy.token_logprobs(torch.tensor([ids]), temperature)[0]
            at = 0
            sampled = []
            for role, message in episode.messages:
                if role == "assistant":
                    sampled.extend(trainer[at + 1 : at + len(message)].tolist())
                at += len(message)
            expected = [lp for step in episode.logprobs for lp in step]
            assert torch.allclose(torch.tensor(sampled), torch.tensor(expected), atol=1e-5)
            # the scale matters: at another temperature the same tokens have other logprobs
            other = policy.token_logprobs(torch.tensor([ids]), temperature * 2)[0]
            assert not torch.allclose(other, trainer, atol=1e-3)


def test_learning_bench_gpu_preset_runs_its_shape_on_cpu(tmp_path):
    # `--device cuda` selects the gpu preset; its shape (5-step problems, 1024 held-out problems) runs here on CPU,
    # shrunk to the smallest transformer, so that the preset's code path is exercised without a GPU.
    out = tmp_path / "gpu"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning.py"),
            "--preset",
            "gpu",
            "--workers",
            "1",
            "--arms",
            "grpo,full",
            "--sizes",
            "qwen-xs",
            "--steps",
            "1",
            "--prompts",
            "2",
            "--group",
            "2",
            "--seeds",
            "1",
            "--eval-size",
            "4",
            "--sft-steps",
            "2",
            "--hint-drill",
            "2",
            "--pretrain",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PRIME_RL_SRC": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "qwen-xs" / "results.json").read_text())
    assert results["preset"] == "gpu" and results["settings"]["task_steps"] == 5
    assert {r["arm"] for r in results["runs"]} == {"grpo", "full"}
    assert all(len(r["curve"]) == 2 for r in results["runs"])


def test_a_prime_rl_checkout_whose_loss_does_not_import_is_refused_before_any_work(tmp_path):
    # A checkout without the loss module (or without PRIME-RL's dependencies) fails at the first GRPO run's result
    # otherwise, after every queued run of the pool.
    (tmp_path / "src" / "prime_rl").mkdir(parents=True)
    (tmp_path / "src" / "prime_rl" / "__init__.py").write_text("")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "learning.py"),
            "--preset",
            "tiny",
            "--prime-rl-src",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "PRIME-RL's loss does not import" in done.stderr and "pip install -e '.[contract]'" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_hinted_rollout_puts_the_right_line_before_every_step():
    # the gate's "pass rate with a right hint": the hint is the step's right line given the previous *written* result
    import random

    import torch

    task = _task()
    torch.manual_seed(0)
    policy = task.Policy(16, 1)
    problems = [task.sample_problem(random.Random(k), 3) for k in range(4)]
    for episode in task.rollout(policy, problems, False, torch.Generator().manual_seed(0), 1.0, hinted=True):
        hints = [task.decode(ids[1:]) for role, ids in episode.messages[1:] if role == "user"]
        value, expected = episode.problem.start, []
        for k, line in enumerate(episode.lines):
            expected.append(task.HINT_TEMPLATE.format(detail=episode.problem.line(value, k)))
            written = task.parse_result(line)
            value = written if written is not None else episode.problem.apply(value, k)
        assert hints == expected
        roles = [role for role, _ in episode.messages]
        assert roles[:4] == ["user", "user", "assistant", "tool"] and roles.count("user") == 1 + len(episode.lines)
