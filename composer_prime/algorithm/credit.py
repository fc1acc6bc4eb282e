"""Advantages: the group-relative outcome (channel 1) plus per-step teacher credit (channel 3), per sampled token.

Outcome (Dr. GRPO, arXiv:2503.20783): each trace of a group gets `coef * (reward - mean(rewards))`, optionally
divided by the group's reward std. Every sampled token of the trace carries it: tool calls, the final answer, and
the self-summary turns of a compacted trace (a summary ends one branch; it is a sampled node like any other, so the
model learns to write summaries that lead to solved tasks).

Replay: the teacher hook leaves `trace.info["teacher"]` (schema in docs/design.md) with each teacher's score in
[-1, 1] for some steps. Per step the scores are aggregated (mean, weighted mean, median or min); a step is credited
only with enough teachers that agree in sign, and then every sampled token of that step gets `replay_coef * A_step`
on top of the outcome advantage. The info block comes from outside (another process, maybe another version of the
hook), so it is parsed step by step: whatever is malformed is skipped and counted by reason, never raised.

The per-token list is in PRIME-RL's compact sampled-token order (`routing.assign_advantages`): the nodes with any
sampled token, in node order, each contributing its sampled tokens.

Hint tokens survive zero-advantage filtering. PRIME-RL's `filter_zero_advantages` (on by default) takes every
sampled token whose advantage is exactly 0.0 out of the rl component, and drops a sample left with none. In a group
whose rewards are all equal (all fail, all pass) every advantage is 0.0, so the hint tokens, which live in the rl
component (docs/design.md), would be filtered away exactly where RL has no signal and hints matter most. A hint token
whose advantage is exactly 0.0 therefore carries `HINT_MARK`, the smallest positive double: non-zero to the
orchestrator's filter and admission gates (they compare Python floats), and exactly 0.0 once the trainer builds its
float32 advantage tensor, so the policy-gradient term is unchanged. Non-hint tokens of such groups are still pruned.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from composer_prime.algorithm.config import OutcomeConfig, ReplayConfig
from composer_prime.teachers.schema import TeacherStep

HINT_MARK = 5e-324
"""Advantage of a hint token whose credit is exactly 0.0: keeps it through PRIME-RL's zero-advantage filter, and is
0.0 in float32 (the trainer's advantage dtype)."""


class NonFiniteReward(ValueError):
    """A trace's reward is NaN or infinite: refused at the group, naming the task, before it reaches the trainer."""


def outcome_advantages(rewards: list[float], config: OutcomeConfig) -> list[float]:
    """`coef * (r - mean)` per trace, divided by the std (population, as GRPO) when `normalize_std` and std > 0."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centered = [r - mean for r in rewards]
    if config.normalize_std:
        std = math.sqrt(sum(c * c for c in centered) / len(centered))
        if std > 0:
            centered = [c / std for c in centered]
    return [config.coef * c for c in centered]


@dataclass
class StepCredit:
    """What the teacher block of one trace yields."""

    advantage: dict[int, float] = field(default_factory=dict)
    """Node index -> aggregated teacher score A_step of the steps that are credited."""
    hints: dict[int, str] = field(default_factory=dict)
    """Node index -> a teacher's hint for the step (hint-target evidence; kept even when the step is not credited)."""
    agreement: list[float] = field(default_factory=list)
    """Per credited step: the fraction of its teachers agreeing in sign with the aggregate."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Reason -> steps (or scores, for `unknown_teacher`) skipped."""


def step_credit(trace: Any, config: ReplayConfig) -> StepCredit:
    """Parse `trace.info["teacher"]` into per-step credit and hints. Never raises on malformed info.

    Each step is validated alone with the hook's own `TeacherStep` (composer_prime.teachers.schema), so one bad step
    (a score outside [-1, 1] or not a number, a missing node) costs that step only."""
    out = StepCredit()
    block = (trace.info or {}).get("teacher")
    if block is None:
        return out
    if not isinstance(block, dict) or not isinstance(block.get("steps"), list):
        out.skipped["malformed_info"] += 1
        return out
    teachers = block.get("teachers")
    known = {t for t in teachers if isinstance(t, str)} if isinstance(teachers, list) else None
    weights = block.get("weights") if isinstance(block.get("weights"), dict) else {}
    sampled = {i for i, node in enumerate(trace.nodes) if node.sampled and any(node.mask)}
    seen: set[int] = set()
    for raw in block["steps"]:
        try:
            step = TeacherStep.model_validate(raw, strict=True)
        except ValidationError:
            out.skipped["malformed_step"] += 1
            continue
        if step.node not in sampled:
            out.skipped["not_a_sampled_node"] += 1
            continue
        if step.node in seen:
            out.skipped["duplicate_step"] += 1
            continue
        seen.add(step.node)
        if step.hint is not None and step.hint.strip():
            out.hints[step.node] = step.hint.strip()
        scores: dict[str, float] = {}
        for teacher, score in step.scores.items():
            if known is not None and teacher not in known:
                out.skipped["unknown_teacher"] += 1
            elif math.isfinite(score):
                scores[teacher] = float(score)
        if len(scores) < config.min_teachers or not scores:
            out.skipped["too_few_teachers"] += 1
            continue
        value = _aggregate(scores, weights, config.aggregate)
        agreeing = sum(1 for s in scores.values() if _sign(s) == _sign(value)) / len(scores)
        if agreeing < config.min_agreement:
            out.skipped["low_agreement"] += 1
            continue
        out.advantage[step.node] = value
        out.agreement.append(agreeing)
    return out


def token_advantages(trace: Any, outcome: float, credit: dict[int, float], replay_coef: float) -> list[float]:
    """Per sampled token, in compact sampled-token order: the outcome plus `replay_coef * A_step` on credited steps;
    a hint token (a strictly negative reference logprob) whose value is exactly 0.0 gets `HINT_MARK`."""
    values: list[float] = []
    for i, node in enumerate(trace.nodes):
        count = sum(node.mask)
        if not count:
            continue
        value = outcome + replay_coef * credit.get(i, 0.0)
        reference = node.reference_logprobs
        if value == 0.0 and reference is not None and len(reference) == count:
            values.extend(HINT_MARK if ref < 0.0 and math.isfinite(ref) else 0.0 for ref in reference)
        else:
            values.extend([value] * count)
    return values


def check_rewards(traces: list[Any]) -> list[float]:
    """The group's rewards as floats; raises `NonFiniteReward` naming the task, the trace and the value."""
    rewards = []
    for trace in traces:
        reward = float(trace.reward) if trace.reward is not None else math.nan
        if not math.isfinite(reward):
            task = getattr(getattr(trace, "task", None), "data", None)
            raise NonFiniteReward(
                f"trace {getattr(trace, 'id', '?')!r} of task idx={getattr(task, 'idx', '?')} "
                f"(id={getattr(task, 'id', None) or getattr(task, 'instance_id', None)!r}) has reward {reward}: the "
                "composer algorithm refuses a non-finite reward before it reaches the trainer. Fix the environment's "
                f"reward functions (trace.rewards = {dict(getattr(trace, 'rewards', {}) or {})!r})"
            )
        rewards.append(reward)
    return rewards


def _aggregate(scores: dict[str, float], weights: dict[str, Any], how: str) -> float:
    values = list(scores.values())
    if how == "median":
        return float(statistics.median(values))
    if how == "min":
        return min(values)
    if how == "weighted_mean":
        w = {t: float(weights[t]) if _positive(weights.get(t)) else 1.0 for t in scores}
        return sum(scores[t] * w[t] for t in scores) / sum(w.values())
    return sum(values) / len(values)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def group_advantages(traces: list[Any], config: Any) -> list[list[float]]:
    """Per trace of one group, its per-token advantages (compact sampled order); records replay metrics on each.

    `config` is a `ComposerAlgoConfig` (or PRIME-RL's subclass of it)."""
    outcomes = outcome_advantages(check_rewards(traces), config.outcome)
    result = []
    for trace, outcome in zip(traces, outcomes, strict=True):
        credit = step_credit(trace, config.replay) if config.replay.enabled else StepCredit()
        record_replay_metrics(trace, credit, outcome)
        result.append(token_advantages(trace, outcome, credit.advantage, config.replay.replay_coef))
    return result


def record_replay_metrics(trace: Any, credit: StepCredit, outcome: float) -> None:
    steps = sum(1 for node in trace.nodes if node.sampled and any(node.mask))
    metrics = {
        "composer/algo/outcome_advantage": outcome,
        "composer/algo/replay/steps": float(len(credit.advantage)),
        "composer/algo/replay/coverage": len(credit.advantage) / steps if steps else 0.0,
        "composer/algo/replay/agreement": sum(credit.agreement) / len(credit.agreement) if credit.agreement else 0.0,
        "composer/algo/replay/mean_step_advantage": (
            sum(credit.advantage.values()) / len(credit.advantage) if credit.advantage else 0.0
        ),
    }
    metrics |= {f"composer/algo/replay/skipped/{reason}": float(n) for reason, n in credit.skipped.items()}
    trace.metrics.update(metrics)
