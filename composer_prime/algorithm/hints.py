"""Hint self-distillation targets: which message gets a hint, what the hint says, and what the policy scores.

Composer's "targeted RL with textual feedback": at an error site of a trace (a tool call that failed, an edit that
the next test run shows broken, a step a teacher criticised with a hint), insert a short hint into the local
context just before that assistant message and let the live policy prefill-score the message's own sampled tokens
under that context. Those hint-conditioned logprobs are the teacher of the hint term of `composer_loss`: the policy
is pulled toward what it would have written had it known the hint, on that message only.

1. `select_targets`: candidates come from `composer_prime.evidence` (the same reading of the trace the teacher hook
   gates on) and the teacher hints of `trace.info["teacher"]`; one per step, by the configured kind priority and
   then latest step first, at most `max_targets_per_trace`. Summary turns are never targets.
2. `hint_text`: the teacher's hint when the step has one, else the kind's template filled with the evidence.
3. `prefill_request`: the branch's tokens up to the target message, the hint rendered as a message (with PRIME-RL's
   renderer, as `opsd` renders its demonstration), then the target message's tokens. With `before_target` the prefix
   is exactly the context the policy sampled in, so a prefix cache already holds it and only hint + target are new.
4. `reference_for`: the returned per-token logprobs mapped back onto the target message's sampled tokens only.
   Every other token keeps no reference, which the wire carries as 0.0 ("no hint here", docs/design.md).
5. `score_hints`: the above for every target of a trace, scored concurrently under a shared limit of requests in
   flight, each target with a deadline covering its wait for a slot and the request; a failed, timed-out or
   malformed score drops that target and is counted, never raised. `scoring.py` runs it for whole episodes off the
   orchestrator's consumer.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from composer_prime.algorithm.config import HintConfig
from composer_prime.algorithm.credit import step_credit
from composer_prime.evidence import Step, steps, trim


@dataclass(frozen=True)
class HintTarget:
    node: int
    """Index into `trace.nodes` of the target (sampled assistant) message."""
    kind: str
    """The evidence that made it a target (`HintConfig.kinds`)."""
    text: str
    """The hint."""


@dataclass(frozen=True)
class PrefillRequest:
    target: HintTarget
    token_ids: list[int]
    target_start: int
    """Offset of the target message's first token in `token_ids`."""
    new_tokens: int
    """Tokens a prefix cache holding the sampled context does not already hold (hint + target for
    `before_target`; everything for `system_prefix`)."""


@dataclass
class HintStats:
    targets: int = 0
    """Targets whose reference was written."""
    tokens: int = 0
    """Sampled tokens that carry a hint reference."""
    ref_gap: list[float] = field(default_factory=list)
    """Per hint token: reference logprob minus sampling logprob."""
    prefill_tokens: int = 0
    """Tokens sent for prefill scoring."""
    new_tokens: int = 0
    """Of those, the tokens not already in a prefix cache of the sampled context."""
    skipped: Counter[str] = field(default_factory=Counter)


def node_path(trace: Any, node: int) -> list[int]:
    """Root-to-`node` node indices."""
    path: list[int] = []
    current: int | None = node
    while current is not None:
        path.append(current)
        current = trace.nodes[current].parent
    return path[::-1]


def select_targets(
    trace: Any, config: HintConfig, teacher_hints: dict[int, str], trace_steps: list[Step] | None = None
) -> list[HintTarget]:
    """At most `max_targets_per_trace` targets, by kind priority then latest step first."""
    priority = {kind: k for k, kind in enumerate(config.kinds)}
    candidates: list[tuple[int, int, HintTarget]] = []
    for step in steps(trace) if trace_steps is None else trace_steps:
        if step.is_summary or not any(trace.nodes[step.node].mask):
            continue
        for kind in config.kinds:
            if kind == "teacher_hint":
                detail = teacher_hints.get(step.node)
            else:
                detail = next((f.detail for f in step.failures if f.kind == kind), None)
            if detail:
                text = trim(config.template(kind).format(detail=detail), config.max_hint_chars)
                candidates.append((priority[kind], -step.turn, HintTarget(step.node, kind, text)))
                break
    candidates.sort(key=lambda c: (c[0], c[1]))
    return [target for _, _, target in candidates[: config.max_targets_per_trace]]


def prefill_request(trace: Any, target: HintTarget, hint_ids: list[int], placement: str) -> PrefillRequest:
    path = node_path(trace, target.node)
    prefix = [t for i in path[:-1] for t in trace.nodes[i].token_ids]
    own = list(trace.nodes[target.node].token_ids)
    if placement == "system_prefix":
        ids = [*hint_ids, *prefix, *own]
        return PrefillRequest(target, ids, len(hint_ids) + len(prefix), len(ids))
    ids = [*prefix, *hint_ids, *own]
    return PrefillRequest(target, ids, len(prefix) + len(hint_ids), len(hint_ids) + len(own))


def reference_for(trace: Any, request: PrefillRequest, scored: list[float]) -> list[float]:
    """The target message's sampled-token logprobs out of a prefill score of `request.token_ids`.

    Raises ValueError when the score does not fit the request (wrong length, NaN or +inf, a positive logprob):
    the caller drops the target. -inf is kept: the loss reads it as "drop this token"."""
    if len(scored) != len(request.token_ids):
        raise ValueError(f"prefill returned {len(scored)} logprobs for {len(request.token_ids)} tokens")
    node = trace.nodes[request.target.node]
    window = scored[request.target_start : request.target_start + len(node.token_ids)]
    values = [float(v) for v, sampled in zip(window, node.mask, strict=True) if sampled]
    if any(math.isnan(v) or v > 0 for v in values):
        raise ValueError("prefill returned NaN or positive logprobs on the target")
    return values


async def score_hints(
    trace: Any,
    config: HintConfig,
    teacher_hints: dict[int, str],
    render: Callable[[str, str], list[int]],
    score: Callable[[list[int]], Awaitable[list[float]]],
    gate: asyncio.Semaphore | None = None,
) -> HintStats:
    """Select, score and write the hint references of one trace onto its nodes (`node.reference_logprobs`).

    `render(role, text)` is the token ids of one message; `score(token_ids)` one logprob per token (PRIME-RL's
    `InferencePool.score`). `gate` bounds the requests in flight (shared by every trace that holds it; a fresh one
    of `config.max_concurrent_scores` slots when None). Each target must get a slot and its answer within
    `config.score_timeout_s` of this call: `queue_timeout` when no slot came in time, `score_timeout` when the
    pool did not answer in time."""
    targets = [
        t for t in select_targets(trace, config, teacher_hints) if trace.nodes[t.node].reference_logprobs is None
    ]
    return await score_targets(trace, targets, config, render, score, gate)


async def score_targets(
    trace: Any,
    targets: list[HintTarget],
    config: HintConfig,
    render: Callable[[str, str], list[int]],
    score: Callable[[list[int]], Awaitable[list[float]]],
    gate: asyncio.Semaphore | None = None,
) -> HintStats:
    """Score `targets` of `trace` and write their references (see `score_hints`, which selects them)."""
    stats = HintStats()
    if not targets:
        return stats
    gate = gate or asyncio.Semaphore(config.max_concurrent_scores)
    role = config.role if config.placement == "before_target" else "system"
    deadline = asyncio.get_running_loop().time() + config.score_timeout_s

    async def one(target: HintTarget) -> tuple[PrefillRequest, list[float] | str]:
        request = prefill_request(trace, target, list(render(role, target.text)), config.placement)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(gate.acquire(), max(deadline - loop.time(), 0.0))
        except TimeoutError:
            return request, "queue_timeout"
        try:
            scored = await asyncio.wait_for(score(request.token_ids), max(deadline - loop.time(), 0.0))
            return request, reference_for(trace, request, list(scored))
        except TimeoutError:
            return request, "score_timeout"
        except ValueError:
            return request, "bad_score"
        except Exception:  # noqa: BLE001 - a pool error of any kind drops this hint, never the episode
            return request, "score_failed"
        finally:
            gate.release()

    for request, result in await asyncio.gather(*(one(t) for t in targets)):
        stats.prefill_tokens += len(request.token_ids)
        stats.new_tokens += request.new_tokens
        if isinstance(result, str):
            stats.skipped[result] += 1
            continue
        node = trace.nodes[request.target.node]
        node.reference_logprobs = result
        stats.targets += 1
        stats.tokens += len(result)
        stats.ref_gap.extend(r - p for r, p in zip(result, node.logprobs, strict=True) if math.isfinite(r))
    return stats


def record_hint_metrics(trace: Any, stats: HintStats) -> None:
    metrics = {
        "composer/algo/hint/targets": float(stats.targets),
        "composer/algo/hint/tokens": float(stats.tokens),
        "composer/algo/hint/ref_gap": sum(stats.ref_gap) / len(stats.ref_gap) if stats.ref_gap else 0.0,
        "composer/algo/hint/prefill_tokens": float(stats.prefill_tokens),
        "composer/algo/hint/new_tokens": float(stats.new_tokens),
    }
    metrics |= {f"composer/algo/hint/skipped/{reason}": float(n) for reason, n in stats.skipped.items()}
    trace.metrics.update(metrics)


async def annotate_hints(
    traces: list[Any],
    config: Any,
    render: Callable[[str, str], list[int]],
    score: Callable[[list[int]], Awaitable[list[float]]],
    gate: asyncio.Semaphore | None = None,
) -> list[HintStats]:
    """`score_hints` for every trace of an episode, concurrently under one `gate` (see `score_hints`), with each
    trace's teacher hints as evidence; the hint metrics recorded on each trace. `config` is a `ComposerAlgoConfig`;
    with hints off nothing is scored."""
    if not config.hints.enabled:
        return [HintStats() for _ in traces]
    gate = gate or asyncio.Semaphore(config.hints.max_concurrent_scores)
    results = await asyncio.gather(
        *(score_hints(t, config.hints, step_credit(t, config.replay).hints, render, score, gate) for t in traces)
    )
    for trace, stats in zip(traces, results, strict=True):
        record_hint_metrics(trace, stats)
    return list(results)
