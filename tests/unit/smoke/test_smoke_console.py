"""The smoke's live console: a line per finished step with each channel's figures, within 100 columns, a failing
teacher's URL and error once, and an unreachable `--teacher-url` said at start (real files, real sockets)."""

from __future__ import annotations

import json
from pathlib import Path

from composer_prime.process.ports import free_port
from composer_prime.smoke.console import WIDTH, StepLines, progress_line, teacher_url_warning
from composer_prime.smoke.report import AGG

DOWN = "http://127.0.0.1:9/v1: checker: ConnectError: All connection attempts failed"


def _trace(solved: float, failed: float, queries: float, errors: dict | None = None) -> dict:
    return {
        "rewards": {"solved": {"score": solved, "weight": 1.0}},
        "metrics": {
            "composer/teacher/failed": failed,
            "composer/teacher/queries": queries,
        },
        "info": {"teacher": {"teachers": ["checker"], "steps": [], "errors": errors or {}}},
    }


def _step(run: Path, step: int, episodes: list[tuple[str, dict]], replay: float, hints: float) -> None:
    folder = run / "rollouts" / f"step_{step}" / "train" / "all"
    folder.mkdir(parents=True)
    lines = [json.dumps({"group": {"id": g}, "traces": [t]}) for g, t in episodes]
    (folder / "traces.jsonl").write_text("\n".join(lines) + "\n")
    rows = [
        {  # PRIME-RL's orchestrator row: the algorithm's metrics, aggregated (mean per trace)
            "step": step,
            AGG + "metrics/composer/algo/replay/steps/mean": replay,
            AGG + "metrics/composer/algo/hint/targets/mean": hints,
        },
        {"step": step, "loss/mean": 0.1},  # the trainer's row: not what marks a step done
    ]
    with (run / "metrics.jsonl").open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def test_each_step_gets_one_line_with_every_channel_and_a_failing_teacher_is_named_once(tmp_path: Path) -> None:
    run = tmp_path / "run" / "feature-deletion--model--x"
    (run / "configs").mkdir(parents=True)
    watch = StepLines(tmp_path, steps=3)
    assert watch.poll() == []
    failing = {"checker": DOWN}
    traces = [("g1", _trace(1.0, 3, 4, failing)), ("g1", _trace(0.0, 0, 4)), ("g2", _trace(0.0, 0, 0))]
    _step(run, 1, traces, replay=4, hints=1.0)  # 1 hint target per trace: 3
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 2, "train/agg')  # a row being written: not a step yet
    first = watch.poll()
    assert first[0] == "step 1/3  reward 0.33  pass 33%  flat 1/2  hints 3  replay 4.0  teachers 3/8 failed"
    assert first[1] == f"warning: teacher 'checker' failed at step 1: {DOWN}"
    assert len(f"[{1234.5:6.1f}s] " + first[0].replace("1/3", "10/10")) <= WIDTH  # with the time stamp
    assert watch.poll() == []  # shown once
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().rsplit("\n", 1)[0] + "\n")
    _step(run, 2, [("g3", _trace(1.0, 1, 2, failing))], replay=0, hints=0.0)
    assert [line.split("  ")[0] for line in watch.poll()] == ["step 2/3"]  # the same teacher's error: not again


def test_the_stage_is_named_before_and_while_prime_rl_runs(tmp_path: Path) -> None:
    assert "starting the inference server" in progress_line(tmp_path, 3)
    logs = tmp_path / "run" / "x" / "logs" / "latest"
    (tmp_path / "run" / "x" / "configs").mkdir(parents=True)
    logs.mkdir(parents=True)
    (logs / "orchestrator.log").write_text("12:00:01 INFO Waiting for the inference server to be ready\n")
    line = progress_line(tmp_path, 3)
    assert line.startswith("rl (3) | orchestrator: Waiting for the inferen") and "trainer: starting" in line


def test_an_unreachable_teacher_url_is_said_at_start_and_a_reachable_one_is_not() -> None:
    from tests.support.scripted_server import Reply, ScriptedModelServer

    down = f"http://127.0.0.1:{free_port()}/v1"
    warning = teacher_url_warning(down, timeout_s=2)
    assert warning is not None and down in warning and "every teacher query will fail" in warning
    with ScriptedModelServer([Reply(content="x")]) as server:
        assert teacher_url_warning(server.base_url, timeout_s=5) is None
