"""Self-summarization in real verifiers rollouts: the summary is a sampled node of the trace, the next turn starts a
new branch from [system, task, summary], and the task's reward lands on the trace that holds them."""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf

from composer_agent.compaction import RESUME_FRAMING, SUMMARY_PROMPT
from composer_prime.text import estimate_tokens
from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer, ToolCall

SUMMARY_1 = "SUMMARY-1: wrote step1 to progress.txt. Next: append step2."
SUMMARY_2 = "SUMMARY-2: progress.txt has step1 and step2. Next: finish."


def bash(command: str, prompt_tokens: int) -> Reply:
    return Reply(tool_calls=[ToolCall("bash", {"command": command})], prompt_tokens=prompt_tokens, completion_tokens=20)


def progress_task() -> vf.Task:
    return files_task(
        "Write step1 then step2 to progress.txt, one per line.",
        files={},
        expected={"progress.txt": "step1\nstep2\n"},
    )


def run(agent: vf.Agent, task: vf.Task) -> vf.Trace:
    return asyncio.run(asyncio.wait_for(agent.run(task), 120))


def test_compaction_opens_a_new_branch_from_a_sampled_summary() -> None:
    script = [
        bash("echo step1 > progress.txt", prompt_tokens=600),  # 600 + 20 >= 512: compact after this turn
        Reply(content="", completion_tokens=0),  # an empty summary is resampled
        Reply(content=SUMMARY_1, completion_tokens=40),
        bash("echo step2 >> progress.txt", prompt_tokens=700),  # compact again
        Reply(content=SUMMARY_2, completion_tokens=30),
        Reply(tool_calls=[ToolCall("finish", {})], prompt_tokens=200, completion_tokens=5),
    ]
    harness = {"compaction": {"summarize_at_tokens": 512, "summary_max_tokens": 256}}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests

    assert trace.ok, trace.errors
    assert trace.reward == 1.0
    assert len(requests) == 6

    # The summary calls: the whole conversation plus the summary prompt, tools listed but disabled, bounded length.
    first_summary = requests[1]
    assert first_summary["messages"][-1] == {"role": "user", "content": SUMMARY_PROMPT}
    assert first_summary["messages"][:-1] == requests[0]["messages"] + first_summary["messages"][2:4]
    assert [m["role"] for m in first_summary["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert first_summary["tool_choice"] == "none" and first_summary["tools"] == requests[0]["tools"]
    assert first_summary["max_tokens"] == 256
    assert requests[2]["messages"] == first_summary["messages"]  # the resample repeats the request

    # The turn after a compaction starts from [system, task, summary].
    system, task = requests[0]["messages"][:2]
    resumed = requests[3]["messages"]
    assert resumed == [system, task, {"role": "user", "content": RESUME_FRAMING.format(summary=SUMMARY_1)}]
    assert requests[5]["messages"] == [
        system,
        task,
        {"role": "user", "content": RESUME_FRAMING.format(summary=SUMMARY_2)},
    ]

    # On the trace: the summaries are sampled nodes, and each compaction forked a new branch after the task.
    summary_nodes = [n for n in trace.nodes if n.sampled and n.message.content in (SUMMARY_1, SUMMARY_2)]
    assert len(summary_nodes) == 2
    assert trace.num_branches >= 3
    branch_texts = [[m.content for m in b.messages] for b in trace.branches]
    assert any(SUMMARY_1 in texts for texts in branch_texts)
    framed = RESUME_FRAMING.format(summary=SUMMARY_1)
    resumed_branch = next(b for b in trace.branches if framed in [m.content for m in b.messages])
    assert [m.role for m in resumed_branch.messages][:3] == ["system", "user", "user"]
    assert resumed_branch.messages[1].content == task["content"]

    metrics = trace.metrics
    assert metrics["composer/agent/compactions"] == 2
    assert metrics["composer/agent/failed_summaries"] == 1
    assert metrics["composer/agent/summary_tokens"] == 70
    # usage of the turn (600 + 20) plus the estimated size of the tool output appended after it
    tool_output = first_summary["messages"][3]["content"]
    assert metrics["composer/agent/compaction_1/context_before"] == 620 + estimate_tokens(tool_output)
    assert metrics["composer/agent/compaction_1/context_after"] == 700
    assert metrics["composer/agent/compaction_2/context_after"] == 200
    assert metrics["composer/agent/turns"] == 3
    info = trace.info["composer_agent"]
    assert info["threshold"] == 512
    assert [c["attempts"] for c in info["compactions"]] == [2, 1]


def finish(prompt_tokens: int = 100) -> Reply:
    return Reply(tool_calls=[ToolCall("finish", {})], prompt_tokens=prompt_tokens, completion_tokens=5)


def test_threshold_defaults_from_the_model_window_and_the_summary_is_bounded() -> None:
    long_summary = "A" * 2000 + "MIDDLE" + "Z" * 2000
    script = [
        bash("echo step1 > progress.txt; echo step2 >> progress.txt", prompt_tokens=10_500),  # window 20000 -> 10000
        Reply(content=long_summary, completion_tokens=1000),
        finish(),
    ]
    harness = {"compaction": {"summary_max_tokens": 100}}
    with ScriptedModelServer(script, max_model_len=20_000) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests

    assert trace.ok and trace.reward == 1.0
    info = trace.info["composer_agent"]
    assert (info["window"], info["threshold"]) == (20_000, 10_000)  # max(20000 - 16384, 20000 // 2)
    assert len(info["compactions"]) == 1
    framed = requests[2]["messages"][-1]["content"]
    summary = framed.split("<summary>\n", 1)[1].rsplit("\n</summary>", 1)[0]
    assert len(summary) <= 100 * 4
    assert summary.startswith("AAAA") and summary.endswith("ZZZZ") and "MIDDLE" not in summary
    # The sampled summary node keeps the full text; only the next context is bounded.
    assert any(n.sampled and n.message.content == long_summary for n in trace.nodes)


def test_no_window_and_no_threshold_means_no_compaction() -> None:
    script = [bash("echo step1 > progress.txt; echo step2 >> progress.txt", prompt_tokens=1_000_000), finish()]
    with ScriptedModelServer(script, max_model_len=None) as server:
        trace = run(scripted_agent(server.base_url, server.model), progress_task())
        assert len(server.requests) == 2
    assert trace.ok and trace.reward == 1.0
    info = trace.info["composer_agent"]
    assert info["window"] is None and info["threshold"] is None and info["compactions"] == []


def test_empty_summaries_end_the_rollout_cleanly() -> None:
    script = [bash("echo step1 > progress.txt", prompt_tokens=600), Reply(content=""), Reply(content="   ")]
    harness = {"compaction": {"summarize_at_tokens": 512, "summary_attempts": 2}}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        assert len(server.requests) == 3
    assert trace.ok, trace.errors
    assert trace.reward == 0.0  # scored as usual: step2 was never written
    assert trace.info["composer_agent"]["finish_reason"] == "compaction_failed"
    assert trace.metrics["composer/agent/failed_summaries"] == 2
    assert trace.metrics["composer/agent/compactions"] == 0
    # verifiers and PRIME-RL see the end as a truncation, not a completed task.
    assert trace.stop_condition == "compaction_failed" and trace.is_truncated
    # Two leaves end in empty attempts; one branch stays trainable so the turn before trains once, and no attempt's
    # tokens train (their masks are cleared).
    attempts = [
        i for i, n in enumerate(trace.nodes) if n.sampled and n.message.role == "assistant" and not n.message.tool_calls
    ]
    assert len(attempts) == 2
    ending = [b for b in trace.branches if any(b.nodes[-1] is trace.nodes[i] for i in attempts)]
    assert len(ending) == 2 and [b.trainable for b in ending] == [False, True]
    assert all(not any(trace.nodes[i].mask) for i in attempts)


def test_rejected_summary_attempts_are_kept_out_of_training() -> None:
    """An empty attempt, then an accepted summary: the empty attempt's branch does not train; the accepted summary's
    branch (with the turns before it) and the branch after the compaction do."""
    script = [
        bash("echo step1 > progress.txt", prompt_tokens=600),
        Reply(content="", completion_tokens=0),
        Reply(content=SUMMARY_1, completion_tokens=40),
        bash("echo step2 >> progress.txt", prompt_tokens=100),
        finish(),
    ]
    harness = {"compaction": {"summarize_at_tokens": 512}}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())

    assert trace.ok and trace.reward == 1.0
    assert trace.stop_condition == "agent_completed" and not trace.is_truncated
    assert len(trace.branches) == 3
    rejected, accepted, resumed = (
        next(b for b in trace.branches if not b.nodes[-1].message.tool_calls and not b.nodes[-1].message.content),
        next(b for b in trace.branches if b.nodes[-1].message.content == SUMMARY_1),
        next(b for b in trace.branches if b.nodes[-1].message.tool_calls),
    )
    assert [b.trainable for b in (rejected, accepted, resumed)] == [False, True, True]
    assert [m.role for m in accepted.messages] == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert resumed.messages[2].content == RESUME_FRAMING.format(summary=SUMMARY_1)


def test_compactions_are_capped() -> None:
    script = [
        bash("echo step1 > progress.txt", prompt_tokens=600),
        Reply(content=SUMMARY_1),
        bash("echo step2 >> progress.txt", prompt_tokens=700),  # over the threshold again, but the cap is 1
        finish(prompt_tokens=900),
    ]
    harness = {"compaction": {"summarize_at_tokens": 512, "max_compactions": 1}}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests
    assert trace.ok and trace.reward == 1.0
    assert len(requests) == 4
    assert requests[3]["messages"][-1]["role"] == "tool"  # continued on the full context
    info = trace.info["composer_agent"]
    assert len(info["compactions"]) == 1 and info["compaction_cap_reached"] is True


def test_context_overflow_compacts_or_stops_cleanly() -> None:
    overflow = Reply(status=400, content="This model's maximum context length is 4096 tokens. Please reduce the length")
    script = [
        bash("echo step1 > progress.txt", prompt_tokens=100),
        overflow,  # the next turn no longer fits, far below the configured threshold
        Reply(content=SUMMARY_1, completion_tokens=40),
        bash("echo step2 >> progress.txt", prompt_tokens=150),
        finish(),
    ]
    harness = {"compaction": {"summarize_at_tokens": 100_000}}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests

    assert trace.ok, trace.errors
    if trace.stop_condition == "context_length":
        # The snapshot PRIME-RL pins recognises the overflow in the interception and stops the rollout there.
        assert len(requests) == 2
        assert trace.info["composer_agent"]["finish_reason"] == "stopped: context_length"
        assert trace.reward == 0.0
        return
    # verifiers 0.4.0 relays the server's 400: the loop compacts from the last request that fit and goes on.
    assert trace.reward == 1.0
    assert requests[2]["messages"] == [*requests[0]["messages"], {"role": "user", "content": SUMMARY_PROMPT}]
    assert requests[3]["messages"][-1]["content"] == RESUME_FRAMING.format(summary=SUMMARY_1)
    assert trace.metrics["composer/agent/compactions"] == 1


def test_overflow_with_nothing_to_compact_stops_the_trace_as_context_length() -> None:
    """The first request is already too long: nothing fit before, so there is nothing to summarise; the trace stops
    as `context_length`, the condition verifiers' own interception uses for an overlong prompt."""
    overflow = Reply(status=400, content="This model's maximum context length is 4096 tokens. Please reduce the length")
    with ScriptedModelServer([overflow]) as server:
        trace = run(scripted_agent(server.base_url, server.model), progress_task())
    assert trace.ok, trace.errors
    assert trace.stop_condition == "context_length"
    assert trace.info["composer_agent"]["finish_reason"] in ("context_overflow", "stopped: context_length")


def test_summary_budget_is_sized_from_the_window_and_the_prompt() -> None:
    """An 8192-token window and a 5332-token context: a 4096-token summary would not fit, so `max_tokens` is what
    the window leaves after the request."""
    script = [
        bash("echo step1 > progress.txt; echo step2 >> progress.txt", prompt_tokens=5300),  # + 20 completion
        Reply(content=SUMMARY_1, completion_tokens=40),
        finish(),
    ]
    harness = {"compaction": {"summarize_at_tokens": 5000, "summary_max_tokens": 4096}}
    with ScriptedModelServer(script, max_model_len=8192) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests
    assert trace.ok and trace.reward == 1.0
    summary_request = requests[1]
    assert summary_request["messages"][-1]["content"] == SUMMARY_PROMPT
    prompt = 5320 + estimate_tokens(requests[1]["messages"][-2]["content"]) + estimate_tokens(SUMMARY_PROMPT)
    assert 256 <= summary_request["max_tokens"] <= 8192 - prompt


def test_overflowing_summary_request_is_shrunk_and_retried() -> None:
    """The server refuses the summary request as too long: the request is sent again with the long tool output
    middle-truncated, and the rollout continues from the summary."""
    overflow = Reply(status=400, content="This model's maximum context length is 4096 tokens. Please reduce the length")
    script = [
        bash("seq 1 4000; echo step1 > progress.txt", prompt_tokens=600),
        overflow,
        Reply(content=SUMMARY_1, completion_tokens=40),
        bash("echo step2 >> progress.txt", prompt_tokens=150),
        finish(),
    ]
    harness = {"compaction": {"summarize_at_tokens": 512}, "tool_output_max_chars": 20000}
    with ScriptedModelServer(script) as server:
        trace = run(scripted_agent(server.base_url, server.model, harness), progress_task())
        requests = server.requests

    assert trace.ok and trace.reward == 1.0, trace.info["composer_agent"]
    first, second = requests[1]["messages"], requests[2]["messages"]
    assert first[-1]["content"] == second[-1]["content"] == SUMMARY_PROMPT
    assert first[:3] == second[:3]  # system, task and the tool call are kept as they were
    assert len(second[3]["content"]) <= len(first[3]["content"]) // 4 + 100 and "truncated" in second[3]["content"]
    assert requests[3]["messages"][-1]["content"] == RESUME_FRAMING.format(summary=SUMMARY_1)
    assert trace.info["composer_agent"]["finish_reason"] == "finish"
