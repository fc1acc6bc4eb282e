"""Sibling hints: a successful trace of the same group as the hint context of a failed one (SDPO).

SDPO (Hübotter et al., "Reinforcement Learning via Self-Distillation", arXiv 2601.20802) gives self-distillation a
teacher even where no one wrote feedback: the policy itself, conditioned on a successful rollout of the same prompt,
scores a failed rollout's tokens. Here that is one more source of hint text beside teacher hints and the evidence
templates (`hints.py`), with the same targets, prefill scoring and loss term:

1. Success is known only when the whole group is in, so sibling hints are chosen at group time, after every
   episode's own hints were scored (`HintScoring.siblings`, called by the algorithm's `score_group`).
2. In a group where some trace reached `hints.sibling_min_reward`, each trace below it gets up to
   `hints.sibling_targets_per_trace` targets on its latest sampled steps that hold no reference yet (never summary
   turns), beside the targets its own hints took. Its donor is one of the successes (spread over them by position).
3. The hint text is the `sibling` template filled with what the donor did: its diff (`trace.info["patch"]`, what
   coding tasksets record) when it has one, else its own sampled message at the same turn (else its last: its text
   and its tool calls as `name({arguments})`), cut at a line end to fit `hints.max_hint_chars` with the template
   (`head`: a diff keeps its header and first hunks in order), made once per donor and reused.
4. A group without a success gets none: the other sources stand alone.

Each trace records `composer/algo/hint/sibling_targets` (sibling targets scored; the channel's share is that over
`composer/algo/hint/targets` plus it), `sibling_tokens`, `sibling_prefill_tokens` and `sibling_new_tokens` (its
prefill cost), and `sibling_skipped/<reason>`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from composer_prime.algorithm.config import HintConfig
from composer_prime.algorithm.hints import HintStats, HintTarget, score_targets
from composer_prime.evidence import Step, message_text, steps, tool_calls

METRIC = "composer/algo/hint/sibling_targets"


def donor_detail(donor: Any, turn: int) -> str:
    """What the successful `donor` did: its diff, else its sampled message at `turn` (else its last)."""
    patch = (getattr(donor, "info", None) or {}).get("patch")
    if isinstance(patch, str) and patch.strip():
        return patch.strip()
    own = [step for step in steps(donor) if not step.is_summary]
    if not own:
        return ""
    step = next((s for s in own if s.turn == turn), own[-1])
    message = donor.nodes[step.node].message
    calls = [f"{name}({json.dumps(arguments, sort_keys=True)})" for _, name, arguments in tool_calls(message)]
    return "\n".join(part for part in (message_text(message).strip(), *calls) if part)


def open_steps(trace: Any) -> list[Step]:
    """Sampled, non-summary steps of `trace` with no hint reference yet, latest first."""
    found = [
        step
        for step in steps(trace)
        if not step.is_summary
        and any(trace.nodes[step.node].mask)
        and trace.nodes[step.node].reference_logprobs is None
    ]
    return sorted(found, key=lambda step: -step.turn)


def sibling_targets(traces: list[Any], rewards: list[float], config: HintConfig) -> list[list[HintTarget]]:
    """Per trace of one group, its sibling hint targets (empty for successes and for groups without one)."""
    successes = [k for k, reward in enumerate(rewards) if reward >= config.sibling_min_reward]
    chosen: list[list[HintTarget]] = [[] for _ in traces]
    if not successes:
        return chosen
    template = config.template("sibling")
    room = max(config.max_hint_chars - len(template.replace("{detail}", "")), 64)
    texts: dict[tuple[int, int], str] = {}
    for k, (trace, reward) in enumerate(zip(traces, rewards, strict=True)):
        if reward >= config.sibling_min_reward:
            continue
        donor = successes[k % len(successes)]
        for step in open_steps(trace)[: config.sibling_targets_per_trace]:
            key = (donor, -1 if _patch(traces[donor]) else step.turn)
            if key not in texts:
                texts[key] = template.format(detail=head(donor_detail(traces[donor], step.turn), room))
            if texts[key] != template.format(detail=""):
                chosen[k].append(HintTarget(step.node, "sibling", texts[key]))
    return chosen


def head(detail: str, limit: int) -> str:
    """`detail` cut to its first `limit` characters at a line end, saying how much was left out: a diff keeps its
    header, its file names and its first hunks in order (the evidence `trim` reorders failing lines first)."""
    if len(detail) <= limit:
        return detail
    marker = "\n[... {} more characters]"
    cut = detail[: limit - len(marker) - 8]
    cut = cut[: cut.rfind("\n")] if "\n" in cut else cut
    return cut + marker.format(len(detail) - len(cut))


def _patch(trace: Any) -> bool:
    patch = (getattr(trace, "info", None) or {}).get("patch")
    return isinstance(patch, str) and bool(patch.strip())


async def annotate_siblings(
    traces: list[Any],
    rewards: list[float],
    config: HintConfig,
    render: Callable[[str, str], list[int]],
    score: Callable[[list[int]], Awaitable[list[float]]],
    gate: asyncio.Semaphore | None = None,
) -> list[HintStats]:
    """Choose and score the sibling hints of one group; records `METRIC` on every trace."""
    if not (config.enabled and config.siblings):
        return [HintStats() for _ in traces]
    gate = gate or asyncio.Semaphore(config.max_concurrent_scores)
    chosen = sibling_targets(traces, rewards, config)
    results = await asyncio.gather(
        *(
            score_targets(trace, targets, config, render, score, gate)
            for trace, targets in zip(traces, chosen, strict=True)
        )
    )
    for trace, stats in zip(traces, results, strict=True):
        trace.metrics[METRIC] = float(stats.targets)
        trace.metrics["composer/algo/hint/sibling_tokens"] = float(stats.tokens)
        trace.metrics["composer/algo/hint/sibling_prefill_tokens"] = float(stats.prefill_tokens)
        trace.metrics["composer/algo/hint/sibling_new_tokens"] = float(stats.new_tokens)
        trace.metrics.update({f"composer/algo/hint/sibling_skipped/{r}": float(n) for r, n in stats.skipped.items()})
    return list(results)
