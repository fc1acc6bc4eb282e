"""Pure pieces of composer-agent: truncation, paths, tool-call parsing, thresholds, metrics, config errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from composer_agent.compaction import RESUME_FRAMING, default_threshold, fresh_context, resolve_threshold
from composer_agent.config import CompactionConfig, ComposerAgentConfig
from composer_agent.model import BodyEncoder, host_endpoint, window_from_listing
from composer_agent.stats import AgentStats, CompactionRecord, metrics_from_info
from composer_agent.text import PathEscape, normalize_path
from composer_agent.tools import TOOL_NAMES, ParsedCall, ToolResult, parse_call, tool_specs
from composer_prime.text import estimate_tokens, truncate_middle


def test_truncate_middle_keeps_head_and_tail_within_budget() -> None:
    assert truncate_middle("short", 10) == "short"
    text = "H" * 500 + "M" * 1000 + "T" * 500
    out = truncate_middle(text, 300)
    assert len(out) <= 300
    assert out.startswith("HHHH") and out.endswith("TTTT") and "M" not in out.replace("[... ", "")
    cut = int(out.split("[... ")[1].split(" ")[0])
    assert cut == len(text) - (len(out) - len(f"\n[... {cut} characters truncated ...]\n"))


def test_estimate_tokens_is_four_chars_per_token() -> None:
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2 and estimate_tokens("") == 0
    assert (
        estimate_tokens([{"role": "user", "content": "x"}])
        == (len(json.dumps([{"role": "user", "content": "x"}])) + 3) // 4
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.py", "a.py"),
        ("./src/../a.py", "a.py"),
        ("", "."),
        (" src/ ", "src"),
        ("/w/src/x.py", "src/x.py"),
        ("/w", "."),
    ],
)
def test_normalize_path_accepts_paths_inside(path: str, expected: str) -> None:
    assert normalize_path(path, ("/w",)) == expected


@pytest.mark.parametrize("path", ["..", "../x", "src/../../x", "/etc/passwd", "/wx/a", "a\x00b"])
def test_normalize_path_refuses_escapes(path: str) -> None:
    with pytest.raises(PathEscape):
        normalize_path(path, ("/w",))


def test_tool_specs_follow_the_contract() -> None:
    specs = {s["function"]["name"]: s["function"] for s in tool_specs()}
    assert tuple(specs) == TOOL_NAMES == ("bash", "view", "str_replace", "create", "search", "finish")
    params = {
        name: (set(f["parameters"]["properties"]), set(f["parameters"].get("required", [])))
        for name, f in specs.items()
    }
    assert params == {
        "bash": ({"command", "timeout"}, {"command"}),
        "view": ({"path", "start_line", "end_line"}, {"path"}),
        "str_replace": ({"path", "old_str", "new_str"}, {"path", "old_str", "new_str"}),
        "create": ({"path", "content"}, {"path", "content"}),
        "search": ({"pattern", "path"}, {"pattern"}),
        "finish": ({"message"}, set()),
    }
    assert all(f["description"] for f in specs.values())
    assert "title" not in json.dumps(specs)
    assert [s["function"]["name"] for s in tool_specs(["search"])] == [
        "bash",
        "view",
        "str_replace",
        "create",
        "finish",
    ]


def test_parse_call_classifies_mistakes() -> None:
    enabled = TOOL_NAMES
    ok = parse_call("view", '{"path": "a", "start_line": 2}', enabled)
    assert isinstance(ok, ParsedCall) and ok.args.start_line == 2
    assert isinstance(parse_call("finish", None, enabled), ParsedCall)  # no arguments at all
    assert isinstance(parse_call("finish", "  ", enabled), ParsedCall)
    decoded = parse_call("bash", {"command": "ls"}, enabled)  # already decoded by a lenient server
    assert isinstance(decoded, ParsedCall) and decoded.args.command == "ls"
    cases = {
        ("bash", '{"command": '): "malformed_json",
        ("bash", '"ls"'): "malformed_json",
        ("bash", 42): "malformed_json",
        (7, "{}"): "unknown_tool",
        ("shell", "{}"): "unknown_tool",
        (None, "{}"): "unknown_tool",
        ("bash", "{}"): "bad_arguments",
        ("bash", '{"command": "ls", "timeout": "30"}'): "bad_arguments",
        ("bash", '{"command": "ls", "timeout": 1.5}'): "bad_arguments",
        ("view", '{"path": "a", "lines": 3}'): "bad_arguments",
    }
    for (name, args), kind in cases.items():
        result = parse_call(name, args, enabled)
        assert isinstance(result, ToolResult) and result.error == kind, (name, args, result)
    disabled = parse_call("search", '{"pattern": "x"}', ("bash", "finish"))
    assert isinstance(disabled, ToolResult) and disabled.error == "unknown_tool"


def test_parse_call_messages_name_the_problem() -> None:
    result = parse_call("bash", '{"command": "ls", "timeout": "30"}', TOOL_NAMES)
    assert isinstance(result, ToolResult)
    assert "argument 'timeout'" in result.content and "'30'" in result.content and "Example:" in result.content


def test_thresholds() -> None:
    assert default_threshold(131072, 16384) == 114688
    assert default_threshold(20000, 16384) == 10000  # small windows compact at half
    assert resolve_threshold(CompactionConfig(), 131072) == 114688
    assert resolve_threshold(CompactionConfig(summarize_at_tokens=4096), 131072) == 4096
    assert resolve_threshold(CompactionConfig(), None) is None
    assert resolve_threshold(CompactionConfig(enabled=False, summarize_at_tokens=4096), 131072) is None


def test_window_from_listing() -> None:
    listing = {"data": [{"id": "a", "max_model_len": 4096}, {"id": "b", "context_length": 8192}]}
    assert window_from_listing(listing, "b") == 8192
    assert window_from_listing(listing, "c") is None  # ambiguous: several cards, none matching
    assert window_from_listing({"data": [{"id": "served-name", "max_model_len": 4096}]}, "alias") == 4096
    assert window_from_listing({"data": [{"id": "a", "max_model_len": True}]}, "a") is None
    assert window_from_listing({"error": "nope"}, "a") is None


def test_host_endpoint_maps_container_aliases_to_loopback() -> None:
    assert host_endpoint("http://vf.host.internal:4567/v1") == "http://127.0.0.1:4567/v1"
    assert host_endpoint("http://host.docker.internal:80/v1") == "http://127.0.0.1:80/v1"
    assert host_endpoint("http://127.0.0.1:4567/v1") == "http://127.0.0.1:4567/v1"
    assert host_endpoint("https://abc.tunnel.example/v1") == "https://abc.tunnel.example/v1"


def test_host_endpoint_maps_a_container_callback_url_back_to_its_host_origin() -> None:
    """verifiers 0.4's docker/podman runtimes on Linux hand out a URL of a proxy inside the container's network
    namespace; composer-agent's loop runs on the host and must call the origin behind it (the real proxy's table)."""
    from types import SimpleNamespace

    egress = pytest.importorskip("verifiers.v1.runtimes.docker.egress", reason="verifiers without the egress proxy")
    from verifiers.v1.configs.runtime import NetworkPolicyConfig

    proxy = egress.EgressProxy(egress.NetworkPolicy(NetworkPolicyConfig(), []))
    inside = proxy.callback_url("http://127.0.0.1:4567/v1", "127.0.0.1") + "/chat/completions?x=1"
    assert inside.startswith("http://127.0.0.1:0/.vf-host/")
    assert host_endpoint(inside, SimpleNamespace(_proxy=proxy)) == "http://127.0.0.1:4567/v1/chat/completions?x=1"
    assert host_endpoint(inside) == inside  # no runtime to ask: left as is


def test_fresh_context_is_system_task_summary() -> None:
    head = [{"role": "system", "content": "sys"}]
    task = [{"role": "user", "content": "do it"}]
    out = fresh_context(head, task, "  notes  ", max_tokens=100)
    assert out == [*head, *task, {"role": "user", "content": RESUME_FRAMING.format(summary="notes")}]
    long = fresh_context(head, task, "x" * 10_000, max_tokens=100)[-1]["content"]
    assert len(long) < len(RESUME_FRAMING) + 100 * 4


def test_metrics_from_info() -> None:
    stats = AgentStats(turns=5, tool_calls=7, finish_reason="finish")
    stats.error("timeout")
    stats.error("timeout")
    stats.error("path_escape")
    stats.compactions.append(
        CompactionRecord(context_before=9000, context_after=1200, summary_tokens=300, attempts=1, turn=3)
    )
    m = metrics_from_info(json.loads(json.dumps(stats.to_info())))
    assert m["composer/agent/turns"] == 5 and m["composer/agent/tool_calls"] == 7
    assert m["composer/agent/tool_errors"] == 3 and m["composer/agent/tool_errors/timeout"] == 2
    assert m["composer/agent/tool_errors/malformed_json"] == 0
    assert m["composer/agent/compactions"] == 1 and m["composer/agent/summary_tokens"] == 300
    assert m["composer/agent/compaction_1/context_before"] == 9000
    assert m["composer/agent/compaction_1/context_after"] == 1200
    assert m["composer/agent/finished"] == 1
    assert all(isinstance(v, float) for v in m.values())


def test_config_errors_name_field_value_and_fix() -> None:
    with pytest.raises(ValidationError, match="unknown tool 'grep'.*the tools are bash"):
        ComposerAgentConfig(disabled_tools=["grep"])
    with pytest.raises(ValidationError, match="cannot contain 'finish'"):
        ComposerAgentConfig(disabled_tools=["finish"])
    with pytest.raises(ValidationError, match="bash_timeout_s = 100 exceeds max_bash_timeout_s = 10"):
        ComposerAgentConfig(bash_timeout_s=100, max_bash_timeout_s=10)
    # A taskset that exports the harness as its default resolves it under the taskset's own id.
    assert ComposerAgentConfig(id="swe-gym").id == "swe-gym"
    with pytest.raises(ValidationError):
        ComposerAgentConfig(compaction={"summarize_at_tokens": 10})
    with pytest.raises(ValidationError):
        ComposerAgentConfig(compaction={"summary_attempts": 0})
    assert ComposerAgentConfig(id="owner/composer-agent@0.1").id == "owner/composer-agent@0.1"


def test_body_encoder_encodes_each_message_once() -> None:
    """A turn's request re-encodes only the messages it added: the earlier messages' bytes are reused as they are,
    so the encoding cost per turn does not grow with the conversation; a new list (a compaction) starts over."""
    encoder = BodyEncoder()
    system, task = {"role": "system", "content": "sys"}, {"role": "user", "content": "tâche"}
    messages = [system, task]
    first = encoder.body(messages, {"model": "m", "tools": [{"type": "function"}]})
    assert json.loads(first) == {"messages": [system, task], "model": "m", "tools": [{"type": "function"}]}
    kept = list(encoder._encoded)
    messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]})
    messages.append({"role": "tool", "tool_call_id": "1", "content": "ok"})
    second = encoder.body(messages, {"model": "m", "max_tokens": 5})
    assert json.loads(second) == {"messages": messages, "model": "m", "max_tokens": 5}
    assert all(a is b for a, b in zip(kept, encoder._encoded[:2], strict=True))
    fresh = [system, task, {"role": "user", "content": "summary"}]
    assert json.loads(encoder.body(fresh, {"model": "m"}))["messages"] == fresh


FIRST_CALL = """
import asyncio, sys
from composer_agent.model import ModelClient
from tests.support.scripted_server import Reply, ScriptedModelServer

async def main():
    with ScriptedModelServer([Reply(content="a")]) as server:
        before = set(sys.modules)
        client = ModelClient(server.base_url, "secret", server.model, timeout_s=30, max_retries=0)
        await client.complete([{"role": "user", "content": "hi"}], [])
        await client.close()
    print(" ".join(sorted(set(sys.modules) - before)))

asyncio.run(main())
"""


def test_first_model_call_in_a_process_imports_no_sdk() -> None:
    """No SDK client with lazy imports and per-call body validation sits on the model-call path (through the OpenAI
    SDK the first call of a process took 0.4 s on an idle machine, about 3 s on a busy one, loading its resource
    modules lazily): the first call loads no module of an SDK."""
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CALL],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    imported = out.stdout.split()
    assert not [m for m in imported if m.split(".")[0] in {"openai", "anthropic", "litellm"}], imported


def test_model_calls_retry_retryable_statuses_under_one_idempotency_key(monkeypatch) -> None:
    import asyncio

    import composer_agent.model as model
    from composer_agent.model import ModelClient, ModelError
    from tests.support.scripted_server import Reply, ScriptedModelServer

    monkeypatch.setattr(model, "RETRY_BACKOFF_S", 0.01)
    script = [Reply(status=503, content="busy"), Reply(status=429, content="slow down"), Reply(content="done")]

    async def call(server: ScriptedModelServer, retries: int):
        client = ModelClient(server.base_url, "secret", server.model, timeout_s=30, max_retries=retries)
        try:
            return await client.complete([{"role": "user", "content": "hi"}], [])
        finally:
            await client.close()

    with ScriptedModelServer(list(script)) as server:
        assert asyncio.run(call(server, 2)).content == "done"
        keys = {h.get("Idempotency-Key") for h in server.request_headers}
        assert len(server.requests) == 3 and len(keys) == 1 and None not in keys
        assert [h.get("x-stainless-retry-count") for h in server.request_headers] == ["0", "1", "2"]
    with ScriptedModelServer(list(script)) as server, pytest.raises(ModelError, match="HTTP 429"):
        asyncio.run(call(server, 1))  # out of attempts: the last answer's status is the error
    assert len(server.requests) == 2
    with ScriptedModelServer([Reply(status=400, content="bad request")]) as server, pytest.raises(ModelError):
        asyncio.run(call(server, 3))
    assert len(server.requests) == 1  # a 400 is not retried
    import socket

    with socket.socket() as closed:  # a port nothing listens on: every attempt is a transport error
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    client = ModelClient(url, "secret", "m", timeout_s=5, max_retries=1)
    with pytest.raises(ModelError, match="failed: ConnectError"):
        asyncio.run(client.complete([{"role": "user", "content": "hi"}], []))
