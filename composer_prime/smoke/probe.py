"""What is served is what was trained: the largest |difference| in nats between a policy server's prompt logprobs on a
fixed probe prompt and an HF transformers forward of the weights the trainer broadcast (the trainer's view).

The probe prompt is `PROBE_TEXT` tokenized by the model dir's tokenizer, cut to `PROBE_TOKENS` tokens: fewer than
one KV block (vLLM's smallest is 16 tokens), so the server never serves it from its prefix cache and every position
is computed by the weights it holds now. The server is asked through `/inference/v1/generate` (token ids in, what
PRIME-RL's `prefill_logprobs` sends) with `prompt_logprobs = TOP`: at each position it returns the prompt token's
logprob and its `TOP` most likely tokens'; each returned (position, token) is compared with the HF forward's
log-softmax in fp32. A tied LM head left at the start weights, a half-applied reload or a wrong dtype shows up as
tenths of a nat or more; bf16 serving against the fp32 forward of the same bf16 weights stays under 0.01.

`weight_dir` is PRIME-RL's broadcast folder (`broadcasts/step_N/`: `*.safetensors`, an index when sharded) or any HF
model dir; the architecture (`config.json`) and the tokenizer come from `model_dir`, the model the server started on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROBE_TEXT = 'def probe(values):\n    """Sorted, without repeats."""\n    return sorted(set(values))[:3]\n'
"""The fixed probe prompt (its first `PROBE_TOKENS` tokens)."""

PROBE_TOKENS = 15
"""Probe length in tokens: under one KV block of vLLM's smallest size (16), so no position comes from the cache."""

TOP = 5
"""Most likely tokens per position the server returns besides the prompt token."""

GENERATE = "/inference/v1/generate"


class ProbeError(RuntimeError):
    """The probe could not compare: the server's answer, the weights or the tokenizer are not what it needs."""


def probe_ids(model_dir: Path) -> list[int]:
    """`PROBE_TEXT` in token ids of `model_dir`'s tokenizer, at most `PROBE_TOKENS` of them."""
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model_dir)).encode(PROBE_TEXT, add_special_tokens=False)[:PROBE_TOKENS]
    if len(ids) < 2:
        raise ProbeError(f"the tokenizer of {model_dir} encodes the probe prompt as {ids}: at least 2 tokens needed")
    return ids


def served_logprobs(url: str, model: str, ids: list[int], timeout_s: float = 60.0) -> list[dict[int, float]]:
    """Per position after the first: token id -> logprob, as the server at `url` (serving `model`) computes them."""
    import httpx

    body = {
        "model": model,
        "token_ids": ids,
        "sampling_params": {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": TOP},
    }
    response = httpx.post(url.rstrip("/") + GENERATE, json=body, timeout=timeout_s)
    if response.status_code != 200:
        raise ProbeError(f"POST {url}{GENERATE} answered {response.status_code}: {response.text[:300]}")
    entries = response.json().get("prompt_logprobs") or []
    if len(entries) != len(ids):
        raise ProbeError(f"{url} returned {len(entries)} prompt_logprobs entries for {len(ids)} probe tokens")
    positions = []
    for entry in entries[1:]:
        values = {int(token): float(v["logprob"]) for token, v in (entry or {}).items()}
        if any(v > 0 for v in values.values()):  # composer_prime.vllm_plugin's mark of a position read from cache
            raise ProbeError(f"{url} served the probe from its prefix cache (KV blocks under {len(ids) + 1} tokens?)")
        positions.append(values)
    return positions


def trainer_model(model_dir: Path, weight_dir: Path) -> Any:
    """The HF model of `model_dir`'s config holding the tensors of `weight_dir`, in fp32, in eval mode."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    files = sorted(Path(weight_dir).glob("*.safetensors"))
    if not files:
        raise ProbeError(f"weight_dir {weight_dir} holds no *.safetensors; pass a broadcasts/step_N folder")
    config = AutoConfig.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    state = {name: tensor for file in files for name, tensor in load_file(str(file)).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        missing = [name for name in missing if name != "lm_head.weight"]  # the embeddings, shared
    if missing or unexpected:
        raise ProbeError(
            f"weights in {weight_dir} do not fit {model_dir}'s config: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}; pass the model dir the server started on"
        )
    return model


def trainer_logprobs(model: Any, ids: list[int]) -> Any:
    """Log-softmax over the vocabulary at each position after the first: a (len(ids) - 1, vocab) fp32 tensor."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return logits.log_softmax(-1)


def largest_difference(served: list[dict[int, float]], trainer: Any) -> float:
    """max |served - trainer| in nats over every (position, token) the server returned."""
    return max(
        abs(value - float(trainer[i, token])) for i, values in enumerate(served) for token, value in values.items()
    )


def served_vs_trainer_logprob_diff(
    url: str, model: str, weight_dir: Path, model_dir: Path, timeout_s: float = 60.0
) -> float:
    """The largest |difference| in nats between the prompt logprobs the server at `url` serves as `model` and an HF
    forward of `weight_dir`'s weights (architecture and tokenizer from `model_dir`), on the fixed probe prompt."""
    ids = probe_ids(model_dir)
    return largest_difference(
        served_logprobs(url, model, ids, timeout_s), trainer_logprobs(trainer_model(model_dir, weight_dir), ids)
    )
