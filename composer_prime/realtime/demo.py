"""The CPU demonstration: a coding product with scripted users, served by the tiny policy the loop trains.

The product: each user asks for a small function; the policy answers in one of two styles it was warm-started on
in equal measure, a `def` block or a `lambda` one-liner. The users have known, opposite tastes: `alice` keeps `def`
answers and reverts lambdas (an `edit` signal, plus a `tests` run that passes only on the exact answer); `bob` gives
a thumbs up to lambdas and down to `def` (a `thumbs` signal, plus `edit`). Anything else is reverted. With chance
`noise` a user's verdict flips. A share `lagged_share` of sessions is served by a replica `lag` versions behind.

Serving samples the policy at temperature 1 from the weights the loop shipped (`broadcasts/step_<v>/`, bf16), and
records what a serving engine would: prompt tokens, sampled tokens and their logprobs, the policy version. Between
cycles `serve_window` writes one file of sessions and signals into the spool, as a product's log shipper would.

The held-out score: for users and functions never trained on (`HELDOUT`), the probability the policy gives the
user's preferred answer over the other, both scored whole: 0.5 at the warm start, 1.0 when the policy has learned
each user's taste.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from composer_prime.realtime.records import SCHEMA, VERSION

USERS = {"alice": "def", "bob": "def"}
"""Each user's preferred style."""

TRAIN_FUNCTIONS = {"add": "a + b", "sub": "a - b", "mul": "a * b", "mod": "a % b"}
HELDOUT = {"pow": "a ** b", "div": "a / b"}
"""Functions whose sessions never reach the spool: the held-out set."""


def answer(name: str, body: str, style: str) -> str:
    if style == "def":
        return f"def {name}(a, b):\n    return {body}"
    return f"{name} = lambda a, b: {body}"


def prompt(user: str, name: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": f"You are a coding assistant. User: {user}."},
            {"role": "user", "content": f"Write the function {name}(a, b)."}]  # fmt: skip


def build_policy(model_dir: Path, seed: int, steps: int = 120) -> dict[str, float]:
    """Build the tiny Qwen3 policy (smoke pieces) and warm-start it on both styles for every user and function.

    The warm start is the smoke's supervised pass on the assistant spans (`assistant_turns`), batched: every
    demonstration in one padded forward per step, so it takes seconds on a CPU."""
    import time

    import torch
    from renderers import Qwen3RendererConfig, create_renderer

    from composer_prime.smoke import policy

    torch.manual_seed(seed)
    functions = TRAIN_FUNCTIONS | HELDOUT
    branches = [
        prompt(user, name) + [{"role": "assistant", "content": answer(name, body, style)}]
        for user in USERS for name, body in functions.items() for style in ("def", "lambda")
    ]  # fmt: skip
    tokenizer = policy.build_tokenizer([policy.render_text(m, None, generation=False) for m in branches], 400)
    renderer = create_renderer(tokenizer, Qwen3RendererConfig(enable_thinking=False))
    # head_dim 16 (4 heads x 16 = hidden 64): the shape the demo's figures in docs/realtime.md were measured with.
    shape = policy.PolicyShape(vocab_size=400, hidden_size=64, layers=2, heads=4, head_dim=16, max_len=512, seed=seed)
    model = policy.build_model(tokenizer, shape)
    turns = [t for m in branches for t in policy.assistant_turns(renderer, m, [])]
    width = max(len(t.token_ids) for t in turns)
    ids = torch.tensor([t.token_ids + [0] * (width - len(t.token_ids)) for t in turns])
    span = torch.zeros(len(turns), width - 1)
    for row, t in enumerate(turns):
        span[row, t.start - 1 : t.end - 1] = 1.0  # positions predicting the sampled tokens
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    started = time.monotonic()
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * span).sum() / span.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    policy.save_policy(model, tokenizer, model_dir)
    return {"loss": float(loss.detach()), "steps": float(steps), "seconds": time.monotonic() - started}


class Product:
    """The served product: users, replicas and the spool writer."""

    def __init__(self, model_dir: Path, state_dir: Path, spool: Path, config: Any):
        from renderers import Qwen3RendererConfig, create_renderer
        from transformers import AutoTokenizer

        self.model_dir = model_dir
        self.broadcasts = state_dir / "broadcasts"
        self.spool = spool
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.renderer = create_renderer(self.tokenizer, Qwen3RendererConfig(enable_thinking=False))
        self.end_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._models: dict[int, Any] = {}

    def served(self, version: int) -> Any:
        """The policy at `version`: the model dir for 0, else the shipped broadcast (bf16 weights)."""
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM

        if version not in self._models:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, torch_dtype=torch.float32)
            if version > 0:
                state = load_file(self.broadcasts / f"step_{version}" / "model.safetensors")
                model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
                model.tie_weights()
            model.eval()
            self._models = {v: m for v, m in self._models.items() if v >= version - self.config.lag}
            self._models[version] = model
        return self._models[version]

    def sample(
        self, model: Any, prompt_ids: list[int], count: int, rng: random.Random
    ) -> list[tuple[list[int], list[float]]]:
        """`count` answers to one prompt at temperature 1, sampled as a batch with a KV cache; each with the logprob
        of every sampled token (what vLLM returns with `logprobs=0`)."""
        import torch

        generator = torch.Generator().manual_seed(rng.getrandbits(31))
        answers: list[tuple[list[int], list[float]]] = [([], []) for _ in range(count)]
        done = [False] * count
        with torch.no_grad():
            out = model(input_ids=torch.tensor([prompt_ids] * count), use_cache=True)
            for _ in range(self.config.max_tokens):
                logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
                tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
                for row, token in enumerate(tokens.tolist()):
                    if not done[row]:
                        answers[row][0].append(token)
                        answers[row][1].append(float(logp[row, token]))
                        done[row] = token == self.end_id
                if all(done):
                    break
                out = model(input_ids=tokens[:, None], past_key_values=out.past_key_values, use_cache=True)
        return answers

    def verdict(self, user: str, name: str, text: str, rng: random.Random) -> list[dict[str, Any]]:
        """The user's signals on an answer."""
        body = (TRAIN_FUNCTIONS | HELDOUT)[name]
        style = "def" if text.startswith(f"def {name}(") else "lambda" if text.startswith(f"{name} = lambda") else ""
        liked = style == USERS[user]
        if rng.random() < self.config.noise:
            liked = not liked
        if user == "alice":
            exact = text.strip() == answer(name, body, "def")
            return [{"type": "edit", "kept": liked, "after_s": 600.0},
                    {"type": "tests", "passed": 1 if liked and exact else 0, "failed": 0 if liked and exact else 1}]  # fmt: skip
        return [{"type": "thumbs", "up": liked}, {"type": "edit", "kept": liked, "after_s": 600.0}]

    def serve_window(self, cycle: int, version: int, now: float) -> dict[str, float]:
        """One serving window: `sessions` sessions and their signals, appended to `spool/window-<cycle>.jsonl`."""
        import json

        rng = random.Random(self.config.seed * 1000 + cycle)
        lines: list[str] = []
        rewards: list[float] = []
        plan = []
        for k in range(self.config.sessions):
            user, name = rng.choice(sorted(USERS)), rng.choice(sorted(TRAIN_FUNCTIONS))
            lagged = rng.random() < self.config.lagged_share
            plan.append((k, user, name, max(0, version - self.config.lag) if lagged else version))
        sampled: dict[int, tuple[list[int], list[float]]] = {}
        for key in sorted({(u, n, v) for _, u, n, v in plan}):
            rows = [k for k, u, n, v in plan if (u, n, v) == key]
            prompt_ids = self.renderer.render_ids(prompt(key[0], key[1]), add_generation_prompt=True)
            for k, got in zip(rows, self.sample(self.served(key[2]), prompt_ids, len(rows), rng), strict=True):
                sampled[k] = got
        for k, user, name, served in plan:
            messages = prompt(user, name)
            prompt_ids = self.renderer.render_ids(messages, add_generation_prompt=True)
            ids, logprobs = sampled[k]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            sid = f"c{cycle}-s{k}"
            ended = now - 1200.0 + k
            session = {"schema": SCHEMA, "version": VERSION, "kind": "session", "session_id": sid,
                       "policy_version": served, "sampling": {"temperature": 1.0}, "started_at": ended - 30.0, "ended_at": ended, "user": user,
                       "group": name, "messages": [*messages, {"role": "assistant", "content": text}],
                       "branches": [{"segments": [{"token_ids": prompt_ids, "sampled": False},
                                                  {"token_ids": ids, "sampled": True, "logprobs": logprobs}]}]}  # fmt: skip
            lines.append(json.dumps(session))
            signals = self.verdict(user, name, text, rng)
            for signal in signals:
                lines.append(json.dumps({"schema": SCHEMA, "version": VERSION, "kind": "signal", "session_id": sid,
                                         "at": ended + signal.get("after_s", 60.0), "signal": signal}))  # fmt: skip
            liked = next(s for s in signals if s["type"] == "edit")["kept"]
            rewards.append(1.0 if liked else -1.0)
            if self.config.junk and k == 0:
                lines.append(json.dumps(session))  # a retried upload: duplicate
                lines.append('{"schema": "composer-session", "version": 1, "kind": "session", "session_id": ')
                nolog = json.loads(json.dumps(session))
                nolog["session_id"] = f"{sid}-nolog"
                del nolog["branches"][0]["segments"][1]["logprobs"]
                lines.append(json.dumps(nolog))
                secret = json.loads(json.dumps(session))
                secret["session_id"] = f"{sid}-secret"
                secret["messages"][1]["content"] += " Mail me at dev@example.com."
                lines.append(json.dumps(secret))
        from composer_prime.atomic import write_atomic

        write_atomic(self.spool / f"window-{cycle:06d}.jsonl", "\n".join(lines) + "\n")
        return {"served_sessions": float(len(rewards)), "user_reward": sum(rewards) / len(rewards)}


def heldout_score(model: Any, renderer: Any) -> float:
    """Mean over held-out (user, function) of p(preferred answer) / (p(preferred) + p(other)), scored whole."""
    import math

    import torch

    scores = []
    with torch.no_grad():
        for user, style in USERS.items():
            for name, body in HELDOUT.items():
                totals = {}
                for s in ("def", "lambda"):
                    messages = prompt(user, name) + [{"role": "assistant", "content": answer(name, body, s)}]
                    head = len(renderer.render_ids(prompt(user, name), add_generation_prompt=True))
                    ids = renderer.render(messages).token_ids
                    end = max(i for i, m in enumerate(renderer.render(messages).sampled_mask) if m) + 1
                    t = torch.tensor([ids[:end]])
                    logp = torch.log_softmax(model(input_ids=t).logits[0, :-1].float(), dim=-1)
                    totals[s] = float(logp.gather(1, t[0, 1:, None])[head - 1 :, 0].sum())
                other = "lambda" if style == "def" else "def"
                scores.append(1.0 / (1.0 + math.exp(totals[other] - totals[style])))
    return sum(scores) / len(scores)
