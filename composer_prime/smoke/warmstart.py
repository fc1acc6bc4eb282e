"""Warm start: demonstrations from the tasks' gold solutions, and a short supervised pass on them.

A randomly initialised model emits no tool calls, so RL would have nothing to work on. Before RL the policy is
fine-tuned on one demonstration per task, written from the task's gold solution in exactly the messages the
composer-agent loop exchanges (its system prompt and tool specs, the task prompt, its summary prompt and resume
framing), rendered by the Qwen3 renderer the train client uses:

    branch 1: system, task, assistant create(<file the gold patch restores>), tool, summary prompt, assistant summary
    branch 2: system, task, resumed-from-summary, assistant finish(...)

Loss is on the assistant turns' sampled tokens only. The pass stops when the mean loss per sampled token falls
below `target_loss` (or after `max_steps`): a policy that still makes mistakes, so that sampled rollouts both pass
and fail and the group-relative advantage has something to compare.

The messages go through verifiers' chat dialect (`ChatDialect.parse_request`, `message_to_wire`, `tool_to_wire`)
so the rendered demonstration is token for token the prompt the train client renders during rollouts.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.local.policy import Turn, assistant_turns, tool_call


class WarmStartConfig(BaseModel):
    """The supervised pass before RL."""

    model_config = ConfigDict(extra="forbid")

    target_loss: float = Field(0.02, gt=0)
    """Stop once the mean loss per sampled token of an epoch is below this (nats)."""
    max_steps: int = Field(600, ge=1)
    """At most this many optimizer steps (one demonstration turn per step)."""
    lr: float = Field(3e-3, gt=0)
    """AdamW learning rate."""
    seed: int = 0
    """Order of the demonstration turns."""


def wire(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Messages and tools as the train client hands them to the renderer (verifiers' chat dialect round trip)."""
    from verifiers.v1.clients.train import tool_to_wire
    from verifiers.v1.dialects.chat import ChatDialect, message_to_wire

    request = ChatDialect().parse_request({"model": "policy", "messages": messages, "tools": tools})
    return [message_to_wire(m) for m in request.messages], [tool_to_wire(t) for t in request.tools or []]


def gold_file(task: Any, repo: Path) -> tuple[str, str]:
    """(path, content) of the file the task's gold patch restores, from the repository it was mined from."""
    path = task.data.mined.feature.path
    content = (repo / path).read_text()
    added = [line[1:] for line in task.data.mined.gold_patch.splitlines() if line.startswith("+") and line[1:].strip()]
    added = [line for line in added if not line.startswith("++")]
    if not all(line in content for line in added):
        raise ValueError(f"the gold patch of {task.data.name} does not restore {path} of {repo}")
    return path, content


def demonstration(task: Any, harness: Any, specs: list[dict], repo: Path) -> list[list[dict[str, Any]]]:
    """The two branches (message lists) of the task's demonstration."""
    from composer_agent.compaction import RESUME_FRAMING, SUMMARY_PROMPT

    head, prompt = harness.initial_messages(task.data)
    path, content = gold_file(task, repo)
    name = task.data.mined.feature.qualname
    summary = f"Done: restored `{name}` in {path}. Remaining: call finish."
    create = {"role": "assistant", "content": "", "tool_calls": [tool_call("create", path=path, content=content)]}
    lines = len(content.splitlines())
    first = [
        *head,
        *prompt,
        create,
        {"role": "tool", "tool_call_id": "call_create", "content": f"Overwrote {path} ({lines} lines)."},
        {"role": "user", "content": SUMMARY_PROMPT},
        {"role": "assistant", "content": summary},
    ]
    finish = {"role": "assistant", "content": "", "tool_calls": [tool_call("finish", message=f"Restored {name}.")]}
    second = [*head, *prompt, {"role": "user", "content": RESUME_FRAMING.format(summary=summary)}, finish]
    return [first, second]


def corpus(branches: list[list[dict[str, Any]]], tools: list[dict], files: list[str]) -> list[str]:
    """Text to train the tokenizer on: every rendered branch, the repository's files, the tool specs."""
    from composer_prime.local.policy import render_text

    texts = [render_text(b, tools, generation=False) for b in branches]
    return texts + files + [json.dumps(t) for t in tools]


def warm_start(
    model: Any,
    renderer: Any,
    branches: list[tuple[list[dict], list[dict]]],
    config: WarmStartConfig,
    progress: Any = None,
) -> dict[str, float]:
    """Fine-tune `model` in place on the assistant turns of `branches`; returns loss, steps, seconds, turns."""
    import torch

    turns: list[Turn] = [t for messages, tools in branches for t in assistant_turns(renderer, messages, tools)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    rng = random.Random(config.seed)
    model.train()
    start, steps, epoch_loss = time.monotonic(), 0, float("inf")
    while steps < config.max_steps:
        order = list(range(len(turns)))
        rng.shuffle(order)
        total, count = 0.0, 0
        for i in order:
            turn = turns[i]
            ids = torch.tensor([turn.token_ids])
            logits = model(input_ids=ids).logits[0, :-1].float()
            targets = ids[0, 1:]
            nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")[turn.start - 1 : turn.end - 1]
            loss = nll.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += float(nll.detach().sum())
            count += nll.numel()
            steps += 1
            if steps >= config.max_steps:
                break
        epoch_loss = total / max(count, 1)
        if progress is not None:
            progress(steps, epoch_loss)
        if epoch_loss < config.target_loss:
            break
    model.eval()
    return {"loss": epoch_loss, "steps": float(steps), "seconds": time.monotonic() - start, "turns": float(len(turns))}
