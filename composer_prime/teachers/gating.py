"""Which steps of a trace the teachers see: those where a verdict is likely to change the gradient.

Over the steps `composer_prime.evidence.steps` reads from a finished trace, in this order of priority:
1. steps whose tool messages show a failure of a configured kind (failed tool call, failed test run, an edit
   followed by a failure), the kinds in the order configured, each in trace order;
2. the last `final_steps` steps (the finish, and what led to it), latest first;
3. low-confidence steps (mean sampled-token logprob below `low_logprob`, when the nodes carry logprobs), least
   confident first;
cut to `max_steps`. Ungated (`enabled = false`) takes every step in trace order, cut to `max_steps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from composer_prime.teachers.config import GatingConfig


def select(steps: Sequence[Any], gating: GatingConfig) -> list[Any]:
    """The selected steps (evidence `Step`s), most important first."""
    if not gating.enabled:
        return list(steps)[: gating.max_steps]
    chosen: list[Any] = []
    seen: set[int] = set()

    def take(step: Any) -> None:
        if step.node not in seen:
            seen.add(step.node)
            chosen.append(step)

    for kind in gating.failure_kinds:
        for step in steps:
            if any(failure.kind == kind for failure in step.failures):
                take(step)
    if gating.final_steps:
        for step in reversed(list(steps)[-gating.final_steps :]):
            take(step)
    if gating.low_logprob is not None:
        unsure = [s for s in steps if s.mean_logprob is not None and s.mean_logprob < gating.low_logprob]
        for step in sorted(unsure, key=lambda s: s.mean_logprob):
            take(step)
    return chosen[: gating.max_steps]
