"""The teacher hook as a verifiers judge plugin: plugged from config alone into the scoring of any taskset.

    [[orchestrator.train.source.env.taskset.task.judges]]
    id = "composer-teachers"          # resolves the top-level module `composer_teachers`
    [[orchestrator.train.source.env.taskset.task.judges.teachers]]
    name = "..."                      # one table per teacher (config.py)

verifiers runs plugged judges in `Task.score`, after the task's metrics and rewards, inside the rollout's scoring
timeout. `TeacherJudge.score` writes `trace.info["teacher"]` (schema.py), the `composer/teacher/*` metrics, and
returns the weighted mean verdict as the reward `teacher`, weight 0 by default: the verdicts reach training through
the `composer` algorithm, which reads the per-step block, not through `trace.reward`.

Only `Judge.score(task, trace)` and `JudgeConfig`'s `id`/`name`/`weight` are used, which verifiers 0.4.0 and the
snapshot PRIME-RL pins (a60a606) share; judge-call records (`record_judge_call` / `record_judge`) differ between
them and are not used.

The composer environments take the same settings as a `teacher` table on their task config (`TeacherTaskConfig`) and plug
the judge themselves when it is set.
"""

from __future__ import annotations

import logging
from typing import Any

import verifiers.v1 as vf
from pydantic import FiniteFloat, model_validator

from composer_prime.teachers.config import TeachersConfig
from composer_prime.teachers.hook import score_trace

logger = logging.getLogger(__name__)

JUDGE_ID = "composer-teachers"


class TeacherJudgeConfig(vf.JudgeConfig, TeachersConfig):
    """`TeachersConfig` as a judge entry. The client fields `JudgeConfig` brings (`base_url`, `api_key_var`, `model`,
    `sampling`, `prompt`, `headers`, `timeout`) are not used: every teacher names its own endpoint."""

    name: str = "teacher"
    """Key of the reward this judge records (the weighted mean verdict over scored steps)."""
    weight: FiniteFloat = 0.0
    """Weight of that reward in `trace.reward`; 0 keeps the outcome reward test-based."""


class TeacherJudge(vf.Judge[float, TeacherJudgeConfig]):
    async def score(self, task: Any, trace: Any) -> float:
        report = await score_trace(trace, self.config)
        try:
            trace.info["teacher"] = report.info.model_dump(mode="json")
            for name, value in report.metrics.items():
                trace.metrics[name] = float(value)
        except Exception:
            logger.exception("teacher hook: could not record the verdicts on the trace")
        return report.score


class TeacherTaskConfig(vf.TaskConfig):
    """A task config with a `teacher` table that plugs the `composer-teachers` judge when set."""

    teacher: TeachersConfig | None = None
    """Frozen teachers scoring steps of each trace (docs/teachers.md); set, it plugs the `composer-teachers` judge
    with these settings (unless a judge with that id is plugged already)."""

    @model_validator(mode="after")
    def _plug_teacher_judge(self) -> TeacherTaskConfig:
        if self.teacher is not None and not any(judge.id == JUDGE_ID for judge in self.judges):
            entry = TeacherJudgeConfig.model_validate({"id": JUDGE_ID, **self.teacher.model_dump()})
            self.judges = [*self.judges, entry]
        return self


__all__ = ["JUDGE_ID", "TeacherJudge", "TeacherJudgeConfig", "TeacherTaskConfig"]
