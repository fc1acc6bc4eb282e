"""composer-agent solves a small task through tool calls in a real verifiers rollout (subprocess runtime, scripted
model on 127.0.0.1); the reward reads the files it left on disk."""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf

from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer, tool

BUGGY = "def greet(name):\n    return 'hello ' + nam\n\nprint(greet('world'))\n"
FIXED = "def greet(name):\n    return 'hello ' + name\n\nprint(greet('world'))\n"


def run(agent: vf.Agent, task: vf.Task) -> vf.Trace:
    return asyncio.run(asyncio.wait_for(agent.run(task), 120))


def test_solves_task_through_tool_calls() -> None:
    script = [
        tool("search", pattern=r"'hello ' \+ nam$", path="."),
        tool("view", path="greet.py", start_line=1, end_line=2),
        tool("str_replace", path="greet.py", old_str="+ nam\n", new_str="+ name\n"),
        tool("bash", command="python3 greet.py && mkdir -p notes"),
        tool("create", path="notes/done.txt", content="fixed greet\n"),
        tool("view", path="."),
        tool("finish", message="fixed the typo"),
        Reply(content="never sent: the rollout ended at finish"),
    ]
    with ScriptedModelServer(script) as server:
        agent = scripted_agent(server.base_url, server.model)
        task = files_task(
            "greet.py crashes with a NameError. Fix it and leave a note in notes/done.txt.",
            files={"greet.py": BUGGY},
            expected={"greet.py": FIXED, "notes/done.txt": "fixed greet\n"},
        )
        trace = run(agent, task)
        requests = server.requests

    assert trace.ok, trace.errors
    assert trace.reward == 1.0
    assert len(requests) == 7
    tools_offered = [t["function"]["name"] for t in requests[0]["tools"]]
    assert tools_offered == ["bash", "view", "str_replace", "create", "search", "finish"]
    assert requests[0]["messages"][0]["role"] == "system"
    assert requests[0]["messages"][1] == {"role": "user", "content": task.data.prompt}

    def tool_output(i: int) -> str:
        message = requests[i]["messages"][-1]
        assert message["role"] == "tool"
        return message["content"]

    assert "greet.py:2:    return 'hello ' + nam" in tool_output(1)
    assert tool_output(2).splitlines()[1:] == ["     1\tdef greet(name):", "     2\t    return 'hello ' + nam"]
    assert "Replaced 1 occurrence in greet.py" in tool_output(3)
    assert tool_output(4).startswith("hello world\n") and tool_output(4).endswith("[exit code 0]")
    assert tool_output(5) == "Created notes/done.txt (1 lines)."
    assert "f greet.py" in tool_output(6) and "d notes" in tool_output(6) and "f notes/done.txt" in tool_output(6)

    info = trace.info["composer_agent"]
    assert info["finish_reason"] == "finish"
    assert trace.metrics["composer/agent/turns"] == 7
    assert trace.metrics["composer/agent/tool_calls"] == 7
    assert trace.metrics["composer/agent/tool_errors"] == 0
    assert trace.metrics["composer/agent/finished"] == 1
    assert "composer_agent" not in trace.metrics  # the harness @vf.metric returned the same keyed metrics
    # Every turn went through the interception: one linear branch of 7 sampled assistant nodes.
    assert trace.num_branches == 1
    assert sum(node.sampled for node in trace.nodes) == 7


def test_harness_id_resolves_to_the_module() -> None:
    from verifiers.v1.utils.loaders import harness_class

    from composer_agent import ComposerAgentConfig, ComposerAgentHarness

    assert harness_class("composer-agent") is ComposerAgentHarness
    config = vf.AgentConfig(harness={"id": "composer-agent"}, runtime=vf.SubprocessConfig())
    assert isinstance(config.harness, ComposerAgentConfig)
