"""The policies of bench/learning.py by size, their pretraining, and the on-disk cache of every seeded result.

**Sizes.** `gru` is the character-level GRU of bench/learning_task.py (the floor of the size table). The `qwen-*`
sizes are the Qwen3 architecture from transformers at toy size, built by the smoke's own constructor
(`composer_prime.local.policy.build_model`: `Qwen3Config` with grouped-query attention, tied embeddings, fp32) over
the bench's character vocabulary, so one token is one character or one role's template token, as for the GRU. Both
expose the same two calls the bench uses: `policy(ids, state, temperature)` (next-token log-probabilities of the
tempered distribution and the recurrent state: the GRU's hidden state, the transformer's KV cache) and
`policy.token_logprobs(ids, temperature)`.

**Pretraining.** A transformer is pretrained on the task language: correct demonstrations of which half carry right
hints on one to every step, placed as the algorithm places them (bench/learning_task.py `demonstration`); the other
half carry none. There is no drill (every demonstration hinted at every step). Attention copies a line from its
context, so this corpus teaches the policy to read a hint as an LLM's pretraining does. `hint_reading` measures it at
the warm start; the gate (`READING_GATE`): the greedy pass rate with a right hint before every step exceeds the pass
rate without one by 30 points. The GRU keeps its hint drill.

**Cache.** The pretrained base, each seed's warm start (weights and figures) and each (arm, seed) RL run are written
atomically under `--cache`, named by the size and the seed and keyed by a hash of everything that decides them: the
settings, the arm, and the code version (the bytes of the bench's and the algorithm's sources, torch's and
transformers' versions). A rerun with the same key reads the file back, so a table can be completed across
sessions and every figure it reuses is exactly the one first measured.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import learning_task as task
import torch
from torch import nn

from composer_prime.atomic import write_atomic

ROOT = Path(__file__).resolve().parents[1]

READING_GATE = 0.30
"""Warm-start acceptance for a transformer: a right hint before every step lifts the greedy pass rate by 30 points."""

PRETRAIN_HINT_RATE = 0.5
"""Share of pretraining demonstrations with one or two hinted steps (the rest: no hint)."""


@dataclass(frozen=True)
class Size:
    """One row of the size table: the GRU, or a Qwen3 shape (`PolicyShape` fields)."""

    name: str
    kind: str
    hidden: int
    layers: int
    heads: int = 0
    head_dim: int = 0


SIZES = {
    s.name: s
    for s in (
        Size("gru", "gru", 96, 1),
        Size("gru-gpu", "gru", 512, 2),
        Size("qwen-xs", "qwen", 16, 2, 2, 8),
        Size("qwen-s", "qwen", 32, 2, 4, 8),
        Size("qwen-m", "qwen", 64, 3, 4, 16),
        Size("qwen-l", "qwen", 96, 4, 4, 24),
        Size("qwen-xl", "qwen", 256, 6, 8, 32),
        Size("qwen-xxl", "qwen", 512, 8, 8, 64),
    )
}


class CharVocab:
    """The bench's character vocabulary as `build_model` asks a tokenizer: its size and the ids of two specials."""

    def __len__(self) -> int:
        return task.VOCAB

    def convert_tokens_to_ids(self, token: str) -> int:
        return task.PAD  # <|endoftext|> (padding) and <|im_end|> (no stop token: turns have a fixed length)


class QwenPolicy(nn.Module):
    def __init__(self, size: Size):
        super().__init__()
        from composer_prime.local.policy import PolicyShape, build_model

        shape = PolicyShape(vocab_size=400, hidden_size=size.hidden, layers=size.layers, heads=size.heads)
        shape = shape.model_copy(
            update={"head_dim": size.head_dim, "max_len": 512, "seed": torch.initial_seed() % 2**31}
        )
        self.model = build_model(CharVocab(), shape)
        forward = inspect.signature(type(self.model).forward).parameters
        self.cache_arg = "cache" if "cache" in forward else "past_key_values"  # renamed in transformers 5.x

    def forward(self, ids: torch.Tensor, state: Any = None, temperature: float = 1.0) -> tuple[torch.Tensor, Any]:
        """Log-probabilities of the next token at `temperature`, and the KV cache (`state`) extended by `ids`."""
        out = self.model(input_ids=ids, use_cache=True, **{self.cache_arg: state})
        return torch.log_softmax(out.logits.float() / temperature, dim=-1), out[self.cache_arg]

    def token_logprobs(self, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """As the GRU's: right padding needs no mask, a causal model never attends to a later position."""
        logits = self.model(input_ids=ids[:, :-1], use_cache=False).logits.float()
        picked = torch.log_softmax(logits / temperature, dim=-1).gather(2, ids[:, 1:, None])[..., 0]
        return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


def make_policy(size: Size, device: str) -> nn.Module:
    policy = task.Policy(size.hidden, size.layers) if size.kind == "gru" else QwenPolicy(size)
    return policy.to(device)


def parameters(size: Size) -> int:
    torch.manual_seed(0)
    return sum(p.numel() for p in make_policy(size, "cpu").parameters())


SFT = {"gru": {"lr": 3e-3}, "qwen": {"lr": 1e-3, "clip": 1.0, "any_count": True}}
"""Supervised settings (pretraining, warm start) by kind: the GRU's as tuned before; a transformer at 3e-3 or without
clipping stalled near the unigram loss in probes, and one that saw at most two hinted steps per demonstration copied
the first three hints of an episode hinted at every step and broke at the fourth (a context longer than any it had
seen; docs/evidence.md): its hinted demonstrations carry any number of hints, one to every step."""


READS = 0.9
"""A transformer's pretraining stops once a right hint makes `READS` of its steps right (`hint_reading`, greedy)."""
CHECK_EVERY = 50


def pretrain(policy: nn.Module, size: Size, steps: int, task_steps: int) -> int:
    """The base every seed starts from: the GRU's `steps` of hint drill; a transformer's pretraining on the task
    language until it reads a hint (`READS`, checked every `CHECK_EVERY` steps on 64 held-out problems) or for at
    most `steps` steps: as long as it takes the size to read, not longer, for every step teaches arithmetic too and
    the warm start's target is the same for every size. Returns the steps taken."""
    if size.kind == "gru":
        task.hint_drill(policy, steps, task_steps)
        return steps
    rng = random.Random("pretrain")
    held_out = [task.sample_problem(rng, task_steps) for _ in range(64)]
    optimizer = torch.optim.AdamW(policy.parameters(), lr=SFT["qwen"]["lr"])
    done = 0
    while done < steps:
        chunk = min(CHECK_EVERY, steps - done)
        task.supervised(
            policy,
            chunk,
            -1 - done,
            64,
            all_hinted=False,
            hint_rate=PRETRAIN_HINT_RATE,
            task_steps=task_steps,
            optimizer=optimizer,
            **SFT["qwen"],
        )
        done += chunk
        if task.hint_reading(policy, held_out, random.Random(0))["right_hint"] >= READS:
            break
    return done


# --- cache -------------------------------------------------------------------------------------------------------

CODE = [
    "bench/learning_run.py",
    "bench/learning_task.py",
    "bench/learning_policy.py",
    "composer_prime/loss.py",
    "composer_prime/loss_config.py",
    "composer_prime/realtime/cycle/trainer.py",
]
CODE_DIRS = ["composer_prime/algorithm"]


def code_version() -> str:
    """Hash of the sources a result's computation depends on, and of torch's and transformers' versions (the
    presets of bench/learning.py and the report are not among them: the settings are part of every key)."""
    import transformers

    digest = hashlib.sha256(f"{torch.__version__}/{transformers.__version__}".encode())
    files = [ROOT / p for p in CODE] + sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


BASE_FIELDS = ("device", "size", "hint_drill", "pretrain", "task_steps")
"""The settings a base depends on (a warm start adds its own, an RL run depends on them all): a run with other RL
settings reuses the bases and warm starts."""
WARM_FIELDS = (*BASE_FIELDS, "sft_steps", "warm_target", "eval_size")


@dataclass(frozen=True)
class Cache:
    """Results under `root`, one file per (what, size, seed, arm), keyed by `key(...)`; None: no cache."""

    root: Path | None
    version: str

    def path(self, what: str, settings: Any, seed: int | None = None, arm: Any = None, ext: str = "json") -> Path:
        keep = {"base": BASE_FIELDS, "warm": WARM_FIELDS}.get(what)
        values = {k: v for k, v in asdict(settings).items() if keep is None or k in keep}
        fields = {"settings": values, "seed": seed, "arm": asdict(arm) if arm else None, "code": self.version}
        key = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
        name = "-".join(str(p) for p in (what, arm.name if arm else None, None if seed is None else f"seed{seed}") if p)
        return self.root / settings.size / f"{name}-{key}.{ext}"

    def load(self, path: Path) -> Any:
        if self.root is None or not path.exists():
            return None
        if path.suffix == ".pt":
            return torch.load(path, map_location="cpu", weights_only=False)
        return json.loads(path.read_text())

    def store(self, path: Path, value: Any) -> None:
        if self.root is None:
            return
        if path.suffix == ".pt":
            buffer = io.BytesIO()
            torch.save(value, buffer)
            write_atomic(path, buffer.getvalue())
        else:
            write_atomic(path, json.dumps(value, default=str) + "\n")
