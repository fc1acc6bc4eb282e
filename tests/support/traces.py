"""Hand-built verifiers traces: branches of chat messages turned into a real `vf.Trace` node graph.

Each branch is a list of message dicts. Branches that begin with the same messages share those nodes, as verifiers'
graph does when a prompt restates a prefix (compaction restarts from [system, task, summary]). Assistant messages are
sampled unless they carry `"sampled": False`; a node gets `SCAFFOLD` template tokens (mask False) followed by its
content tokens (mask True when sampled). Token ids are consecutive integers, so every node's span is recognisable.
"""

from __future__ import annotations

import json
from typing import Any

import verifiers.v1 as vf

SCAFFOLD = 2
"""Template tokens at the start of every node (role tag, generation prompt): never sampled."""


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def assistant(content: str = "", *calls: dict[str, Any], tokens: int = 3, logprob: float = -0.5) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "_tokens": tokens, "_logprob": logprob}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Implement chunked()."}


def exchange(call_id: str, name: str, answer: str, **arguments: Any) -> list[dict[str, Any]]:
    """A sampled assistant turn with one tool call, and the tool's answer."""
    return [assistant("", tool_call(call_id, name, **arguments)), tool(call_id, answer)]


def five_step_trace() -> vf.Trace:
    """Steps at nodes 2 (tool error), 4 (edit before a failed run), 6 (clean), 8 (failed test run), 10 (finish)."""
    return build_trace(
        [
            [
                SYSTEM,
                TASK,
                *exchange("a", "view", "Error: missing.py does not exist.", path="missing.py"),
                *exchange("b", "str_replace", "Edited m.py.", path="m.py", old_str="x", new_str="y"),
                *exchange("c", "bash", "m.py\n[exit code 0]", command="ls"),
                *exchange(
                    "d",
                    "bash",
                    "FAILED tests/test_m.py::test_chunk - AssertionError\n1 failed\n[exit code 1]",
                    command="python -m pytest -q tests",
                ),
                assistant("", tool_call("e", "finish")),
            ]
        ]
    )


def build_trace(branches: list[list[dict[str, Any]]], info: dict[str, Any] | None = None) -> vf.Trace:
    nodes: list[vf.MessageNode] = []
    index: dict[tuple[int | None, str], int] = {}
    next_token = 1000
    for branch in branches:
        parent: int | None = None
        for raw in branch:
            message = {k: v for k, v in raw.items() if not k.startswith("_") and k != "sampled"}
            key = (parent, json.dumps(raw, sort_keys=True))
            if key in index:
                parent = index[key]
                continue
            sampled = raw["role"] == "assistant" and raw.get("sampled", True)
            length = SCAFFOLD + raw.get("_tokens", 3 if sampled else 4)
            token_ids = list(range(next_token, next_token + length))
            next_token += length
            mask = [False] * SCAFFOLD + [sampled] * (length - SCAFFOLD)
            logprobs = [raw.get("_logprob", -0.5)] * (length - SCAFFOLD) if sampled else []
            nodes.append(
                vf.MessageNode(
                    parent=parent, message=message, sampled=sampled, token_ids=token_ids, mask=mask, logprobs=logprobs
                )
            )
            parent = index[key] = len(nodes) - 1
    return vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="handbuilt", data={}, key="k", hash="h"),
        nodes=nodes,
        info=info or {},
    )
