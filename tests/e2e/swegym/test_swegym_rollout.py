"""A real verifiers rollout of a swe-gym task in local mode: composer-agent, driven by a scripted model on 127.0.0.1,
fixes the bug through tool calls; the box is graded with the instance's hidden tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from swe_gym.taskset import SWEGymTaskset, SWEGymTasksetConfig

from tests.support.rollouts import scripted_rollout
from tests.support.scripted_server import Reply, tool
from tests.support.swegym_repo import FIX_SECRET, build_toy_instance, local_task_config, write_jsonl


@pytest.mark.slow
def test_composer_agent_fixes_the_issue_and_scores_one(tmp_path: Path) -> None:
    toy = build_toy_instance(tmp_path / "src")
    config = SWEGymTasksetConfig(
        data_file=write_jsonl(tmp_path / "rows.jsonl", [toy.row]),
        mode="local",
        task=local_task_config(tmp_path / "cache", toy.repo),
    )
    (task,) = SWEGymTaskset(config).load()
    script = [
        tool("search", pattern="def clamp", path="calc"),
        tool(
            "str_replace",
            path="calc/ops.py",
            old_str="        return lo\n    return x\n",
            new_str=f"        return lo\n    {FIX_SECRET}\n        return hi\n    return x\n",
        ),
        tool(
            "bash", command="python -c 'from calc.ops import clamp; print(clamp(9, 0, 3))' && python -m pytest -q tests"
        ),
        tool("finish", message="clamp now returns hi above the range"),
        Reply(content="never sent: the rollout ended at finish"),
    ]
    trace, requests = scripted_rollout(task, script)

    assert trace.ok, trace.errors
    assert trace.reward == 1.0
    assert trace.metrics["fail_to_pass"] == 1.0 and trace.metrics["pass_to_pass"] == 1.0
    assert len(requests) == 4
    assert requests[0]["messages"][1]["content"] == task.data.prompt
    assert "clamp(x, lo, hi) returns x unchanged" in task.data.prompt
    # The agent's python is the prepared venv and sees the box's code; the hidden tests are not in the box yet.
    bash_output = requests[3]["messages"][-1]["content"]
    assert bash_output.startswith("3\n") and "2 passed" in bash_output
    assert trace.info["patch"].startswith("diff --git a/calc/ops.py b/calc/ops.py")
    assert f"+    {FIX_SECRET}" in trace.info["patch"]


def test_default_harness_is_composer_agent() -> None:
    from verifiers.v1.utils.loaders import default_harness_id, harness_class, resolve_env_config

    from composer_agent import ComposerAgentConfig, ComposerAgentHarness

    assert harness_class(default_harness_id("swe-gym")) is ComposerAgentHarness
    # An agent that names no harness gets composer-agent's config, resolved under the taskset's id.
    config = resolve_env_config({"taskset": {"id": "swe-gym"}})
    assert isinstance(config.agent_harnesses()["agent"], ComposerAgentConfig)
