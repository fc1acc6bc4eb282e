"""Checkpoints from real optimizer steps, written in PRIME-RL's filesystem-broadcast layout.

A small causal transformer LM keeps fp32 master weights (PRIME-RL's default `optimization_dtype = "float32"`) and is
updated by `torch.optim.AdamW` (PRIME-RL's defaults: betas (0.9, 0.999), weight decay 0.01, grad-norm clip 1.0) on a
REINFORCE-shaped loss: token log-likelihoods of sampled-looking sequences weighted by random +/- advantages, so the
gradient is dense and noisy as in RL. Every step is broadcast the way `FileSystemWeightBroadcast` does it: the weights
are cast to bf16 and written as `broadcasts/step_N/model.safetensors` (or `model-0000i-of-0000n.safetensors` shards plus
`model.safetensors.index.json`, index last), metadata `{"format": "pt"}`, then an empty `STABLE` file.

With `master_dtype=torch.bfloat16` the optimizer updates bf16 weights directly (PRIME-RL's
`optimization_dtype = "bfloat16"`); most updates then round away and far fewer values change.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn


@dataclass(frozen=True)
class ModelShape:
    vocab: int = 256
    dim: int = 64
    layers: int = 2
    heads: int = 4
    seq: int = 32
    batch: int = 4


class TinyLM(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.shape = shape
        self.embed_tokens = nn.Embedding(shape.vocab, shape.dim)
        layer = nn.TransformerEncoderLayer(
            shape.dim, shape.heads, dim_feedforward=4 * shape.dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(shape.dim)
        self.lm_head = nn.Linear(shape.dim, shape.vocab, bias=False)
        for _name, param in self.named_parameters():
            if param.dim() >= 2:
                nn.init.normal_(param, std=0.02)  # GPT-style init: weight magnitudes like a pretrained LLM's

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        hidden = self.layers(self.embed_tokens(tokens), mask=mask, is_causal=True)
        return self.lm_head(self.norm(hidden))


class RLTrainer:
    """fp32 (or bf16) master weights + AdamW, one `step()` per RL update."""

    def __init__(self, shape: ModelShape, lr: float, seed: int = 0, master_dtype: torch.dtype = torch.float32):
        torch.manual_seed(seed)
        self.shape = shape
        self.model = TinyLM(shape).to(master_dtype)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
        self.generator = torch.Generator().manual_seed(seed + 1)

    def step(self) -> None:
        shape = self.shape
        tokens = torch.randint(0, shape.vocab, (shape.batch, shape.seq + 1), generator=self.generator)
        advantages = torch.randn(shape.batch, 1, generator=self.generator)
        logits = self.model(tokens[:, :-1]).float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
        loss = -(advantages * logprobs).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()

    def bf16_state_dict(self) -> dict[str, torch.Tensor]:
        return {
            name: tensor.detach().to(torch.bfloat16, copy=True).contiguous()
            for name, tensor in self.model.state_dict().items()
        }


def write_broadcast_step(
    state_dict: dict[str, torch.Tensor], broadcast_dir: Path, step: int, max_shard_bytes: int = 5 * 1024**3
) -> Path:
    """Write `state_dict` as `broadcast_dir/step_{step}` the way PRIME-RL's filesystem broadcast does."""
    step_dir = broadcast_dir / f"step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state_dict.items():
        if shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += tensor.nbytes
    if len(shards) == 1:
        save_file(shards[0], step_dir / "model.safetensors", metadata={"format": "pt"})
    else:
        weight_map = {}
        for index, shard in enumerate(shards, start=1):
            file_name = f"model-{index:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, step_dir / file_name, metadata={"format": "pt"})
            weight_map.update({name: file_name for name in shard})
        total = sum(tensor.nbytes for tensor in state_dict.values())
        index_json = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (step_dir / "model.safetensors.index.json").write_text(json.dumps(index_json, indent=2, sort_keys=True) + "\n")
    (step_dir / "STABLE").touch()
    return step_dir


def make_run(
    output_dir: Path,
    steps: int,
    lr: float = 3e-6,
    shape: ModelShape = ModelShape(),
    max_shard_bytes: int = 5 * 1024**3,
    seed: int = 0,
) -> list[Path]:
    """Train `steps` RL steps and broadcast each one (step 0 = the initial weights). Returns the step dirs."""
    trainer = RLTrainer(shape, lr, seed=seed)
    broadcast_dir = output_dir / "broadcasts"
    dirs = [write_broadcast_step(trainer.bf16_state_dict(), broadcast_dir, 0, max_shard_bytes)]
    for step in range(1, steps + 1):
        trainer.step()
        dirs.append(write_broadcast_step(trainer.bf16_state_dict(), broadcast_dir, step, max_shard_bytes))
    return dirs


def param_count(shape: ModelShape) -> int:
    return sum(math.prod(p.shape) for p in TinyLM(shape).parameters())
