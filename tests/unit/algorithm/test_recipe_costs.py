"""Recipes that turn a channel off pay nothing for it: per shipped recipe over the smoke's launch config, the teacher
queries sent to a scripted OpenAI-compatible teacher on 127.0.0.1 and the hint targets the composer algorithm's core
scores, counted.

Each recipe is merged onto `tomls/cpu-smoke.toml` as PRIME-RL's loader merges overlays; the source's taskset is parsed
by its own config class (`FeatureDeletionConfig`, which plugs the `composer-teachers` judge from the `teacher` table);
the seam's parse-time pruning (`channels.unread_teachers`, `checks.drop_teachers`, what `OrchestratorConfig` runs in
PRIME-RL) is applied; then a plugged judge scores a five-step trace against the scripted server, and the algorithm's
hint channel (`annotate_hints`) runs on it with a counting scorer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from feature_deletion.taskset import FeatureDeletionConfig

from composer_prime.algorithm.channels import TEACHERS_JUDGE, source_channels, unread_teachers
from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.algorithm.hints import annotate_hints
from composer_prime.seam.checks import drop_teachers
from composer_prime.teachers.hook import score_trace
from tests.support.scripted_server import Reply, ScriptedModelServer
from tests.support.traces import five_step_trace
from tests.unit.test_launch_configs import RECIPES, ROOT, deep_merge, load

URL_VARS = ("COMPOSER_TEACHER_OPENAI_URL", "COMPOSER_TEACHER_GEMINI_URL", "COMPOSER_TEACHER_DEEPSEEK_URL")
KEY_VARS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY")
PAYS = {
    # recipe: (teacher queries sent, hint targets scored)
    None: (True, True),
    "grpo-baseline": (False, False),
    "opsd-baseline": (False, False),
    "rlvr-only": (False, False),
    "no-hint": (True, False),
    "no-replay": (True, True),  # hints keep `teacher_hint` targets: the teachers' hints are read
    "no-compaction": (True, True),
}


def costs(recipe: Path | None, server: ScriptedModelServer) -> tuple[int, int]:
    config = load(ROOT / "tomls" / "cpu-smoke.toml")
    if recipe is not None:
        config = deep_merge(config, load(recipe))
    orchestrator = config["orchestrator"]
    (source,) = orchestrator["train"]["source"]
    taskset = FeatureDeletionConfig.model_validate(source["env"]["taskset"])
    if 0 in unread_teachers(orchestrator):
        drop_teachers(taskset.task)
    trace = five_step_trace()
    requests_before = len(server.requests)
    for judge in taskset.task.judges:
        if judge.id == TEACHERS_JUDGE:
            report = asyncio.run(asyncio.wait_for(score_trace(trace, judge), 60))
            trace.info["teacher"] = report.info.model_dump(mode="json")
    queries = len(server.requests) - requests_before
    (channels,) = source_channels(orchestrator)
    if channels.algo != "composer":
        return queries, 0  # PRIME-RL's own algorithm: the composer core, and its hint scoring, never runs
    scored: list[int] = []

    async def score(ids: list[int]) -> list[float]:
        scored.append(len(ids))
        return [-0.25] * len(ids)

    algo = ComposerAlgoConfig.model_validate({k: v for k, v in orchestrator["algo"].items() if k != "type"})
    (stats,) = asyncio.run(annotate_hints([trace], algo, lambda role, text: [5, 5], score))
    assert stats.targets == len(scored)
    return queries, len(scored)


@pytest.mark.parametrize("recipe", [None, *RECIPES], ids=lambda p: p.stem if p else "cpu-smoke")
def test_a_recipe_pays_only_for_the_channels_it_trains(recipe, tmp_path, monkeypatch):
    name = recipe.stem if recipe else None
    assert name in PAYS, f"recipes/{name}.toml is new: add what it pays for (teacher queries, hint targets) to PAYS"
    monkeypatch.chdir(tmp_path)  # the teacher cache and spend ledger are relative paths
    verdict = Reply(content=json.dumps({"score": -0.5, "hint": "Run the failing test first."}))
    with ScriptedModelServer(lambda request: verdict) as server:
        for var in URL_VARS:
            monkeypatch.setenv(var, server.base_url)
        for var in KEY_VARS:
            monkeypatch.setenv(var, "scripted")
        queries, hints = costs(recipe, server)
    teachers_paid, hints_paid = PAYS[name]
    assert (queries > 0) == teachers_paid, f"{name}: {queries} teacher queries"
    assert (hints > 0) == hints_paid, f"{name}: {hints} hint targets scored"
