"""The smoke policy server as a real subprocess on 127.0.0.1, driven by the clients that use it in a run: the
`renderers` generate call of verifiers' train client, PRIME-RL's prefill request, and the admin calls of a weight
update."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest
import torch

from composer_prime.smoke import policy, services
from composer_prime.smoke.reloads import prefill
from composer_prime.smoke.trainer import broadcast

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "system", "content": "You write code."}, {"role": "user", "content": "Restore double in calc.py."}]
TOOLS = [{"type": "function", "function": {"name": "finish", "description": "Finish.",
          "parameters": {"type": "object", "properties": {"message": {"type": "string"}}}}}]  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("policy")
    corpus = [policy.render_text(MESSAGES, TOOLS, generation=True) * 2, "def double(x):\n    return x * 2\n"]
    tokenizer = policy.build_tokenizer(corpus, 500)
    model = policy.build_model(tokenizer, policy.PolicyShape(hidden_size=32, layers=1, heads=2, max_len=512))
    policy.save_policy(model, tokenizer, root / "model")
    server = services.policy_server("stand-in", root / "model", "smoke-policy", 512, services.free_port(),
                                    root / "server.log", seed=0)  # fmt: skip
    try:
        yield server, model, tokenizer, root
    finally:
        server.stop()


def test_generate_and_prefill_agree_and_a_reload_changes_them(served):
    from openai import AsyncOpenAI
    from renderers import Qwen3RendererConfig, create_renderer
    from renderers.client import generate

    server, model, tokenizer, root = served
    renderer = create_renderer(tokenizer, Qwen3RendererConfig(enable_thinking=False))

    listing = httpx.get(f"{server.url}/v1/models").json()
    assert listing["data"][0]["max_model_len"] == 512

    async def scenario():
        client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x")
        result = await generate(client=client, renderer=renderer, messages=MESSAGES, model="smoke-policy",
                                tools=TOOLS, sampling_params={"max_tokens": 12, "temperature": 1.0})  # fmt: skip
        await client.close()
        completion, logprobs = result["completion_ids"], result["completion_logprobs"]
        assert 1 <= len(completion) <= 12 and len(logprobs) == len(completion)
        assert all(math.isfinite(lp) and lp < 0 for lp in logprobs)
        ids = result["prompt_ids"] + completion
        async with httpx.AsyncClient(timeout=60) as http:
            scored = await prefill(http, server.url, "smoke-policy", ids)
            assert len(scored) == len(ids) and scored[0] == 0.0
            # the prefill of what was sampled reproduces the sampling logprobs (same weights, raw distribution)
            assert scored[len(result["prompt_ids"]) :] == pytest.approx(logprobs, abs=1e-4)

            with torch.no_grad():
                model.model.embed_tokens.weight.mul_(1.5)
            step_dir = broadcast(model, root / "trainer", 1)
            reply = await http.post(f"{server.url}/update_weights", json={"weight_dir": str(step_dir)})
            assert reply.status_code == 200 and reply.json()["tensors"] == len(model.state_dict()) - 1
            after = await prefill(http, server.url, "smoke-policy", ids)
            assert max(abs(a - b) for a, b in zip(after[1:], scored[1:], strict=True)) > 1e-2
            health = (await http.get(f"{server.url}/health")).json()
            assert health["reloads"] == 1 and health["weights"] == str(step_dir)
            weights = (await http.get(f"{server.url}/weights")).json()  # vllm_server's route, which the smoke reads
            assert weights == {"weights": str(step_dir), "reloads": 1}

            bad = await http.post(f"{server.url}/update_weights", json={"weight_dir": str(root / "nowhere")})
            assert bad.status_code == 400 and "is not a directory" in bad.text

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_chat_completions_and_pause(served):
    server, _, tokenizer, _ = served

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as http:
            body = {"model": "smoke-policy", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 6}
            reply = (await http.post(f"{server.url}/v1/chat/completions", json=body)).json()
            assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
            prompt = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True)["input_ids"]
            assert reply["usage"]["prompt_tokens"] == len(prompt)
            assert 1 <= reply["usage"]["completion_tokens"] <= 6

            assert (await http.post(f"{server.url}/pause")).status_code == 200
            pending = asyncio.ensure_future(http.post(f"{server.url}/v1/chat/completions", json=body))
            await asyncio.sleep(0.5)
            assert not pending.done()  # generation waits while paused
            assert (await http.post(f"{server.url}/resume")).status_code == 200
            assert (await asyncio.wait_for(pending, 30)).status_code == 200

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_a_request_seed_fixes_its_tokens_whatever_was_sampled_before(served):
    """Per-request `seed` (vLLM's sampling parameter): the same prompt and seed give the same tokens even with other
    requests sampled in between, which is what makes a smoke run repeat under concurrent rollouts."""
    server, _, _, _ = served

    def sample(seed: int | None) -> list[int]:
        params = {"max_tokens": 24, "temperature": 1.0} | ({} if seed is None else {"seed": seed})
        reply = httpx.post(f"{server.url}/inference/v1/generate", timeout=60,
                           json={"model": "smoke-policy", "token_ids": [5, 6, 7, 8], "sampling_params": params})  # fmt: skip
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["token_ids"]

    first = sample(7)
    unseeded = [sample(None) for _ in range(3)]
    assert sample(7) == first
    assert len({tuple(t) for t in [*unseeded, first, sample(8)]}) > 1  # sampling at temperature 1 still varies
