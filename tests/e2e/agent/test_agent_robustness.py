"""composer-agent survives its model: every malformed call becomes an error message back to the model and a counted
metric; a command past its timeout loses its whole process group; turn limits and verifiers' stop conditions end the
rollout cleanly."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import verifiers.v1 as vf

from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer, ToolCall, tool


def run(agent: vf.Agent, task: vf.Task) -> vf.Trace:
    return asyncio.run(asyncio.wait_for(agent.run(task), 120))


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A group whose members are all zombies awaiting their reaper holds no running process.
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_bad_calls_become_error_messages_and_metrics(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("host secret\n")
    script = [
        Reply(tool_calls=[ToolCall("bash", '{"command": "ls"')]),  # truncated JSON
        Reply(tool_calls=[ToolCall("bash", "[1, 2]")]),  # JSON, but not an object
        tool("rm_rf", path="."),
        tool("bash", command=["ls"]),  # wrong type
        tool("str_replace", path="a.txt", old_str="x"),  # missing new_str
        tool("view", path="a.txt", mode="raw"),  # unexpected argument
        Reply(content=None),  # empty reply
        tool("view", path="../../etc/passwd"),
        tool("view", path=str(outside)),
        tool("bash", command=f"ln -s {tmp_path} escape"),
        tool("create", path="escape/pwned.txt", content="x"),  # through a symlink that points outside
        tool("str_replace", path="a.txt", old_str="a", new_str="b"),  # occurs 3 times
        Reply(
            tool_calls=[
                ToolCall("str_replace", {"path": "a.txt", "old_str": "aaa", "new_str": "bbb"}),
                ToolCall("finish", {"message": "done"}),
            ]
        ),
    ]
    with ScriptedModelServer(script) as server:
        task = files_task("Replace aaa with bbb in a.txt.", files={"a.txt": "aaa\n"}, expected={"a.txt": "bbb\n"})
        trace = run(scripted_agent(server.base_url, server.model), task)
        requests = server.requests

    assert trace.ok, trace.errors
    assert trace.reward == 1.0  # it got there in the end
    assert len(requests) == len(script)
    replies = [r["messages"][-1]["content"] for r in requests[1:]]
    assert "not valid JSON" in replies[0] and '{"command": "ls -la"}' in replies[0]
    assert "must be a JSON object, got list" in replies[1]
    assert "unknown tool 'rm_rf'" in replies[2] and "bash, view, str_replace, create, search, finish" in replies[2]
    assert "argument 'command'" in replies[3] and "valid string" in replies[3]
    assert "missing required argument 'new_str'" in replies[4]
    assert "unexpected argument 'mode'" in replies[5]
    assert requests[7]["messages"][-1]["role"] == "user" and "reply was empty" in replies[6]
    assert "leaves the work directory" in replies[7]
    assert "outside the work directory" in replies[8]
    assert "outside the work directory" in replies[10]
    assert "occurs 3 times" in replies[11]
    assert not (tmp_path / "pwned.txt").exists()
    assert outside.read_text() == "host secret\n"

    m = trace.metrics
    assert m["composer/agent/tool_errors/malformed_json"] == 2
    assert m["composer/agent/tool_errors/unknown_tool"] == 1
    assert m["composer/agent/tool_errors/bad_arguments"] == 3
    assert m["composer/agent/tool_errors/empty_reply"] == 1
    assert m["composer/agent/tool_errors/path_escape"] == 3
    assert m["composer/agent/tool_errors/tool_failed"] == 1
    assert m["composer/agent/tool_errors"] == 11
    assert m["composer/agent/turns"] == len(script)
    assert trace.info["composer_agent"]["finish_reason"] == "finish"


def test_command_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "group"
    # The command records its process group, starts a background child, and outlives its 1 s timeout.
    command = f"cut -d' ' -f5 /proc/$$/stat > {marker}; sleep 300 & echo $! >> {marker}; echo started; sleep 300"
    script = [tool("bash", command=command, timeout=1), tool("finish")]
    with ScriptedModelServer(script) as server:
        start = time.monotonic()
        trace = run(scripted_agent(server.base_url, server.model), files_task("wait", {}, {}))
        elapsed = time.monotonic() - start
        output = server.requests[1]["messages"][-1]["content"]

    assert trace.ok, trace.errors
    assert elapsed < 60
    assert output.startswith("started\n")
    assert "[command timed out after 1s; its process group was killed]" in output
    assert trace.metrics["composer/agent/tool_errors/timeout"] == 1
    pgid, child = (int(line) for line in marker.read_text().split())
    deadline = time.monotonic() + 10
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(pgid), f"process group {pgid} (child {child}) survived the timeout"


def test_verifiers_turn_limit_stops_the_loop_cleanly() -> None:
    script = [tool("bash", command="echo 1"), tool("bash", command="echo 2"), tool("bash", command="echo 3")]
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, max_turns=2), files_task("loop", {}, {}))
        assert len(server.requests) == 2
    assert trace.ok, trace.errors
    assert trace.stop_condition == "max_turns"
    assert trace.info["composer_agent"]["finish_reason"].startswith("stopped: ")
    assert trace.metrics["composer/agent/turns"] == 2


def test_harness_turn_limit_and_text_reply_end_the_loop() -> None:
    with ScriptedModelServer([tool("bash", command="true")] * 5) as server:
        trace = run(scripted_agent(server.base_url, server.model, {"max_turns": 3}), files_task("loop", {}, {}))
        assert len(server.requests) == 3
    assert trace.ok and trace.info["composer_agent"]["finish_reason"] == "max_turns"

    with ScriptedModelServer([Reply(content="All done, nothing to change.")]) as server:
        trace = run(scripted_agent(server.base_url, server.model), files_task("talk", {}, {}))
    assert trace.ok and trace.info["composer_agent"]["finish_reason"] == "text_reply"
    assert trace.metrics["composer/agent/finished"] == 0


def test_transient_server_error_is_retried_without_forking_the_trace() -> None:
    script = [Reply(status=503, content="overloaded"), tool("bash", command="echo ok"), tool("finish")]
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model), files_task("retry", {}, {}))
        assert len(server.requests) == 3
    assert trace.ok, trace.errors
    assert trace.info["composer_agent"]["finish_reason"] == "finish"
    assert trace.num_branches == 1 and sum(n.sampled for n in trace.nodes) == 2
