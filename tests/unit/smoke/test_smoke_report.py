"""The smoke's report from a run folder laid out as PRIME-RL writes it: the table fits 100 columns, the served vs
trainer figure in scientific notation, mismatch KL named as off-policy lag with max_off_policy_steps, the hint loss
on an axis of its own, integer step ticks, wait-for-batch plotted, the run's metadata and each channel's cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer_prime.smoke.report import AGG, PICK, build, figure, main, text


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    run = work / "run" / "feature-deletion--model--x"
    (run / "configs").mkdir(parents=True)
    (run / "configs" / "orchestrator.json").write_text(json.dumps({"max_off_policy_steps": 8}))
    rows = []
    for step in (1, 2, 3):
        trace = {
            "rewards": {"solved": {"score": float(step == 2), "weight": 1.0}},
            "metrics": {"composer/teacher/queries": 12.0},
            "info": {"teacher": {"steps": [{"scores": {"a": 0.5}}]}},
        }
        folder = run / "rollouts" / f"step_{step}" / "train" / "all"
        folder.mkdir(parents=True)
        (folder / "traces.jsonl").write_text(json.dumps({"group": {"id": "g"}, "traces": [trace]}) + "\n")
        rows.append(
            {
                "step": step,
                AGG + "metrics/composer/algo/replay/steps/mean": 3.0,
                AGG + "metrics/composer/algo/hint/targets/mean": 2.0,
            }
        )
        trainer = {PICK["loss_pg"]: 0.01 * step, PICK["loss_hint"]: 2.5 + step, "mismatch_kl/all/mean": 0.14}
        rows.append({"step": step, **trainer, "time/wait_for_batch": 249.0})
    for step, reward in ((0, 0.0), (2, 0.5)):  # PRIME-RL's base-model eval, then one every interval
        ev = "eval/feature-deletion-eval/"
        rows.append({"step": step, ev + "all/agent/reward/mean": reward, ev + "all/has_error/mean": 0.0})
        rows.append({"step": step, ev + "all/num_turns/mean": 3.0, ev + "policy_version": float(step), "time": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "logs" / "attempt_2").mkdir(parents=True)
    (run / "logs" / "latest").symlink_to("attempt_2")
    (run / "logs" / "attempt_2" / "trainer.log").write_text(
        "[trainer0]:\x1b[2m13:19:17\x1b[0m INFO Resuming training from checkpoint step 1\x1b[0m\n"
        "[trainer0]:\x1b[2m13:19:17\x1b[0m INFO Starting from step 2 (total_tokens=812, total_samples=8)\x1b[0m\n"
    )
    (run / "logs" / "attempt_2" / "orchestrator.log").write_text("INFO Resuming orchestrator from checkpoint step 1\n")
    meta = {
        "config": {"steps": 3, "seed": 0},
        "overlays": [],
        "rl_command": ["rl"],
        "timings": {"venvs_s": 1.0, "prepare_s": 2.0, "rl_s": 3.0},
        "seconds": 6.0,
        "machine": {"started_utc": "2026-11-29T12:00:00Z", "cpus": 2, "load_at_start": [4.1, 3.0, 2.0]},
        "probes": [],
        "resumed_from": 1,
    }
    (work / "meta.json").write_text(json.dumps(meta))
    return work


def test_the_report_reads_as_a_debugger_needs(tmp_path: Path) -> None:
    report = build(_work(tmp_path))
    report["served_vs_trainer_logprob_diff"] = 2.4e-6  # what a probe found (its forward needs torch)
    assert report["run"]["max_off_policy_steps"] == 8 and report["run"]["cpus"] == 2
    assert report["teacher_queries"] == 36 and report["hint_targets_scored"] == 6
    assert [s["time_wait_for_batch_s"] for s in report["steps"]] == [249.0] * 3  # eval rows are not steps
    assert [(e["step"], e["reward_mean"], e["turns"]) for e in report["evals"]] == [(0, 0.0, 3.0), (2, 0.5, 3.0)]
    assert report["resumed"] == {
        "from_step": 1,
        "trainer": "Resuming training from checkpoint step 1",
        "trainer_progress": "Starting from step 2 (total_tokens=812, total_samples=8)",
        "orchestrator": "Resuming orchestrator from checkpoint step 1",
    }
    printed = text(report)
    table = text(report, width=300).split("served vs trainer")[0]  # as wide as it wants: it needs no squeezing
    assert max(len(line.rstrip()) for line in table.splitlines()) <= 100 and "…" not in table
    assert "2.40e-06 nats" in printed
    assert "off-policy lag" in printed and "max_off_policy_steps = 8" in printed
    assert "12/0" in printed  # teacher queries / failed, per step
    assert "eval feature-deletion-eval at step 2, policy v2: reward 0.50, errors 0%, turns 3.0" in printed
    assert "resumed from the checkpoint of step 1 (PRIME-RL's own resume):" in printed and "total_tokens=812" in printed
    fig = figure(report)
    by_title = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    hints = by_title["hints: targets scored, hint loss"]
    twin = next(ax for ax in fig.axes if ax is not hints and ax.bbox.bounds == hints.bbox.bounds)
    assert [line.get_label() for line in twin.get_lines()] == ["hint loss"]  # its own axis
    assert "hint loss" not in [line.get_label() for line in by_title["loss"].get_lines()]
    timing = [line.get_label() for line in by_title["time per step (s)"].get_lines()]
    assert "wait for batch" in timing
    assert any("max_off_policy_steps = 8" in title for title in by_title)
    for ax in by_title.values():
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    meta_text = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "2.40e-06 nats" in meta_text and "2026-11-29T12:00:00Z" in meta_text


def test_main_writes_the_three_files(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    out.mkdir()
    assert main([str(_work(tmp_path)), str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["hint_targets_scored"] == 6
    assert (out / "report.png").stat().st_size > 10_000 and "step" in (out / "report.txt").read_text()
