"""The single-process trainer of `composer-prime realtime` without PRIME-RL (the plain CPU demo, docs/realtime.md):
PRIME-RL's trainer step on one CPU process, with the project's real loss. A cluster, and the demo with
`--demo.prime-rl`, train with PRIME-RL's own trainer instead; the smoke uses PRIME-RL's throughout.

1. Samples (PRIME-RL's `trace_to_samples`): one sample per trainable branch of every trainable trace; a sampled
   node shared by several branches is trained only in the first. A sample's 1-D streams run over the branch's token
   ids: `inference_logprobs` (the server's sampling logprobs), `advantages` and `ref_logprobs` (spread from the
   nodes, 0.0 where none), `loss_mask` (sampled tokens).
2. Loss (PRIME-RL's per-sample call): the fp32 master model recomputes `trainer_logprobs`, `composer_loss` returns
   each sample's token sum, the sums are added and divided by the batch's rl-token count (loss-mask tokens).
3. Backward, gradient-norm clip 1.0, one `torch.optim.AdamW` step (PRIME-RL's defaults: betas 0.9/0.999, weight
   decay 0.01) on the fp32 master weights.
4. Broadcast (PRIME-RL's `FileSystemWeightBroadcast`): the weights cast to bf16, written as
   `broadcasts/step_N/model.safetensors` (metadata `{"format": "pt"}`), then an empty `STABLE`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.atomic import default_mode


class TrainerConfig(BaseModel):
    """The optimizer step."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-4, gt=0)
    """AdamW learning rate (PRIME-RL's trainer default): one step flips a visible share of the tiny model's bf16
    weights without undoing the warm start."""
    weight_decay: float = Field(0.01, ge=0)
    """AdamW weight decay (PRIME-RL's default)."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient-norm clip (PRIME-RL's default)."""


@dataclass
class LossInputs:
    """Duck-type of PRIME-RL's `LossInputs` for one sample (what `composer_loss` reads)."""

    trainer_logprobs: Any
    inference_logprobs: Any
    ref_logprobs: Any
    advantages: Any
    loss_mask: Any
    loss_weights: Any = None


@dataclass
class Sample:
    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]
    advantages: list[float]
    ref_logprobs: list[float] | None


def assign_advantages(trace: Any, values: list[float]) -> None:
    """PRIME-RL's `routing.assign_advantages` for a list: per node with sampled tokens, its slice of `values`."""
    offset = 0
    for node in trace.nodes:
        count = sum(node.mask)
        if count:
            node.advantages = list(values[offset : offset + count])
            offset += count
    if offset != len(values):
        raise ValueError(f"{len(values)} advantages for {offset} sampled tokens")


def trace_samples(trace: Any) -> list[Sample]:
    """One sample per trainable branch; a sampled node already trained in an earlier branch is masked out."""
    samples: list[Sample] = []
    trained: set[int] = set()
    for branch in trace.branches:
        if not branch.trainable:
            continue
        ids = [id(node) for node in branch.nodes]
        mask: list[bool] = []
        for node, key in zip(branch.nodes, ids, strict=True):
            keep = key not in trained
            mask.extend(m and keep for m in node.mask)
        trained.update(k for k, node in zip(ids, branch.nodes, strict=True) if any(node.mask))
        if not any(mask):
            continue
        samples.append(
            Sample(
                token_ids=branch.token_ids,
                mask=mask,
                logprobs=branch.logprobs,
                advantages=branch.advantages or [0.0] * len(mask),
                ref_logprobs=branch.reference_logprobs,
            )
        )
    return samples


CHANNELS = ("loss/pg", "loss/hint", "loss/kl", "hint_share")
"""The loss split by channel, each weighted as the loss is (by the sample's share of the batch's rl tokens), so
`loss = loss/pg + loss/hint + loss/kl`; and the hint tokens' share of the rl tokens. PRIME-RL's logged
`composer/...` metrics are per-sample means (every sample weighs the same, whatever its length) and the kl term
there is the raw drift, not `kl_tau` times it: they do not add up to the loss, these do."""


def train_step(
    model: Any, optimizer: Any, samples: list[Sample], loss_kwargs: dict[str, Any], config: TrainerConfig
) -> dict[str, float]:
    """One optimizer step over `samples`; returns the loss, the rl-token count and the mean of each loss metric."""
    import torch

    from composer_prime.loss import composer_loss
    from composer_prime.loss_config import parse_loss_kwargs

    kl_tau = parse_loss_kwargs(loss_kwargs).kl_tau
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = sum(sum(s.mask) for s in samples)
    metrics: dict[str, float] = {}
    channels = dict.fromkeys(CHANNELS, 0.0)
    loss_value = 0.0
    for sample in samples:
        ids = torch.tensor([sample.token_ids])
        logits = model(input_ids=ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        trainer_logprobs = torch.cat([torch.zeros(1), logp])  # position 0 has no context; it is never on the mask
        inputs = LossInputs(
            trainer_logprobs=trainer_logprobs,
            inference_logprobs=torch.tensor(sample.logprobs),
            ref_logprobs=torch.tensor(sample.ref_logprobs) if sample.ref_logprobs is not None else None,
            advantages=torch.tensor(sample.advantages),
            loss_mask=torch.tensor(sample.mask),
        )
        out = composer_loss(inputs, **loss_kwargs)
        (out.loss / total_tokens).backward()
        loss_value += float(out.loss.detach()) / total_tokens
        for name, value in out.metrics.items():
            metrics[name] = metrics.get(name, 0.0) + float(value) / len(samples)
        tokens = max(sum(sample.mask), 1) / total_tokens  # the metrics are per-sample means over its loss tokens
        channels["loss/pg"] += float(out.metrics["composer/rl/pg_loss"]) * tokens
        channels["loss/hint"] += float(out.metrics["composer/hint/loss"]) * tokens
        channels["loss/kl"] += kl_tau * float(out.metrics["composer/drift/log_ratio_sq"]) * tokens
        channels["hint_share"] += float(out.metrics["composer/hint/token_frac"]) * tokens
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    model.eval()
    return {
        "loss": loss_value,
        "rl_tokens": float(total_tokens),
        "samples": float(len(samples)),
        "grad_norm": float(grad_norm),
        **metrics,
        **channels,
    }


def broadcast(model: Any, output_dir: Path, step: int) -> Path:
    """Write `broadcasts/step_N/` as PRIME-RL's filesystem broadcast does: bf16 safetensors, then `STABLE`."""
    import torch
    from safetensors.torch import save_file

    step_dir = output_dir / "broadcasts" / f"step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # tied to embed_tokens: HF checkpoints store it once
        state[name] = tensor.detach().to(torch.bfloat16).contiguous()
    tmp = step_dir / "tmp-rank0.safetensors"
    save_file(state, tmp, metadata={"format": "pt"})
    os.chmod(tmp, default_mode())  # safetensors writes 0600; the relay and inference servers may run as other users
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    tmp.rename(step_dir / "model.safetensors")
    (step_dir / "STABLE").touch()
    return step_dir


def make_optimizer(model: Any, config: TrainerConfig) -> Any:
    import torch

    return torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.999), weight_decay=config.weight_decay)
