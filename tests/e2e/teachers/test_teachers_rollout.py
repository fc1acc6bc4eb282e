"""The teacher hook plugged from config alone into a real verifiers scoring run: a composer-agent rollout on
feature-deletion (subprocess runtime, real pytest) against a scripted model, scored by two scripted teachers."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from composer_prime.teachers import TeacherInfo
from tests.support.agent_tasks import scripted_agent
from tests.support.featdel_repo import APPLY_DISCOUNT, CART, INIT, PRICING
from tests.support.scripted_server import API_KEY_VAR, Reply, ScriptedModelServer, tool

pytestmark = pytest.mark.usefixtures("python_on_path")


def teacher_reply(score: float):
    def reply(request):
        step = request["messages"][1]["content"].split("# The step to judge")[1]
        failed = re.search(r"\[exit code [1-9]", step.split("# What the tools answered")[1]) is not None
        hint = "Read shop/cart.py before running the suite." if failed else None
        return Reply(content=json.dumps({"score": -score if failed else score, "hint": hint}))

    return reply


@pytest.mark.parametrize("plug", ["teacher_table", "judge_entry"])
def test_rollout_scored_by_teachers_from_config(tasks_file, tmp_path, plug):
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    script = [
        tool("create", path="shop/pricing.py", content="def format_price(:\n"),  # an edit that breaks the suite
        tool("bash", command="python -m pytest -q"),
        tool("create", path="shop/pricing.py", content=PRICING),
        tool("str_replace", path="shop/cart.py", old_str='"""A shopping cart."""\n', new_str=CART.split("\n\n\n")[0]),
        tool("create", path="shop/__init__.py", content=INIT),
        tool("bash", command="python -m pytest -q"),
        tool("finish", message="apply_discount is back"),
    ]
    with (
        ScriptedModelServer(script) as model,
        ScriptedModelServer(teacher_reply(0.5), model="teacher-a") as a,
        ScriptedModelServer(teacher_reply(1.0), model="teacher-b") as b,
    ):
        teachers = {
            "teachers": [
                {
                    "name": n,
                    "base_url": s.base_url,
                    "model": s.model,
                    "api_key_var": API_KEY_VAR,
                    "input_usd_per_mtok": 0.4,
                    "output_usd_per_mtok": 1.6,
                }
                for n, s in (("a", a), ("b", b))
            ],
            "cache_dir": str(tmp_path / "cache"),
        }
        task_config = (
            {"teacher": teachers} if plug == "teacher_table" else {"judges": [{"id": "composer-teachers", **teachers}]}
        )
        config = resolve_env_config(
            {"taskset": {"id": "feature-deletion", "tasks": str(tasks_file), "task": task_config}}
        )
        task = {t.data.name: t for t in load_taskset(config.taskset)}[APPLY_DISCOUNT]
        trace = asyncio.run(asyncio.wait_for(scripted_agent(model.base_url, model.model).run(task), 180))
        teacher_requests = a.requests + b.requests
    assert trace.ok, trace.errors
    assert trace.reward == 1.0  # the teacher reward has weight 0: the outcome stays test-based
    assert trace.rewards["teacher"].weight == 0.0
    info = TeacherInfo.model_validate(trace.info["teacher"])
    assert info.teachers == ["a", "b"] and info.skipped is None
    sampled = [i for i, node in enumerate(trace.nodes) if node.sampled]
    assert len(sampled) == 7
    broken_edit, failed_run, finish = sampled[0], sampled[1], sampled[-1]
    by_node = {s.node: s for s in info.steps}
    # the failed test run, the edit before it, and the last two steps (the passing run and the finish)
    assert sorted(by_node) == [broken_edit, failed_run, sampled[-2], finish]
    assert by_node[broken_edit].scores == {"a": 0.5, "b": 1.0}
    assert by_node[failed_run].scores == {"a": -0.5, "b": -1.0}
    assert by_node[failed_run].hint == "Read shop/cart.py before running the suite."
    assert by_node[finish].scores == {"a": 0.5, "b": 1.0} and by_node[finish].hint is None
    assert len(teacher_requests) == 8
    assert all(
        r["messages"][1]["content"].startswith("# Task\nThe function `apply_discount`") for r in teacher_requests
    )
    assert trace.metrics["composer/teacher/steps_scored"] == 4.0
    assert trace.metrics["composer/teacher/teachers_answered"] == 2.0
    assert trace.metrics["composer/teacher/cost_usd"] == pytest.approx(info.cost_usd) and info.cost_usd > 0
    assert trace.metrics["composer/teacher/agreement"] == pytest.approx(1 - 0.5 / 2)
