"""On-policy discipline for live sessions: how far behind the trained policy the serving policy was.

A session's age is counted in trainer steps, as PRIME-RL counts its own off-policy rollouts: the trainer's step now
minus the step the weights that served it were trained to (`Steps`; the runner records the step of every version it
ships). Counting shipped versions instead would leave every session "age 0" while shipping is held, however far the
trainer has moved. A fleet rolls out a new version gradually, and sessions wait out their signal window, so live
data is always somewhat off-policy.
Every session trains with its serving-time logprobs as `inference_logprobs`, so the loss's per-token importance
ratio and trust region (PRIME-RL's, and `composer_loss`'s) correct for small ages exactly as they do for PRIME-RL's
own asynchronous rollouts. Beyond `max_age` versions:

- `mode = "drop"`: the session is not trained (counted `stale_dropped`); this is PRIME-RL's own rule for its
  rollouts (`orchestrator.max_off_policy_steps`);
- `mode = "importance_weight"`: the session trains with its advantage scaled by a truncated sequence-level
  importance weight, the geometric mean of the per-token ratios pi_now / pi_served over its sampled tokens
  (length-normalised, as GSPO does, so long sessions are not crushed), capped at `max_weight` (counted
  `stale_weighted`). Sessions older than `hard_max_age` are dropped in either mode.

A session claiming a version newer than the one being trained is a fleet misconfiguration: rejected as
`future_version`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class StalenessConfig(BaseModel):
    """What happens to sessions served by an old policy."""

    model_config = ConfigDict(extra="forbid")

    max_age: int = Field(8, ge=0)
    """Sessions served by weights at most this many trainer steps behind train as they are (K in docs/realtime.md;
    PRIME-RL's `max_off_policy_steps`)."""
    mode: Literal["drop", "importance_weight"] = "drop"
    """Older sessions: `drop` them or train them `importance_weight`ed."""
    max_weight: float = Field(1.0, gt=0)
    """Cap of the sequence-level importance weight (1.0: stale sessions can only count less)."""
    hard_max_age: int = Field(64, ge=0)
    """Sessions more than this many trainer steps old are dropped in either mode."""

    @model_validator(mode="after")
    def _check(self) -> StalenessConfig:
        if self.hard_max_age < self.max_age:
            raise ValueError(
                f"hard_max_age = {self.hard_max_age} is below max_age = {self.max_age}; set hard_max_age >= max_age"
            )
        return self


@dataclass(frozen=True)
class Steps:
    """Where the trainer is: its step now, and the step each shipped policy version was trained to."""

    now: int = 0
    versions: dict[int, int] = field(default_factory=lambda: {0: 0})

    def age(self, policy_version: int) -> int:
        """Trainer steps between the weights that served `policy_version` and the trainer's now; -1 for a version
        not shipped yet (`future_version`). A version missing below the newest is as old as version 0's weights."""
        if policy_version in self.versions:
            return max(0, self.now - self.versions[policy_version])
        if policy_version > max(self.versions, default=0):
            return -1
        return self.now


Verdict = Literal["fresh", "weight", "drop", "future_version"]


def classify(age: int, config: StalenessConfig) -> Verdict:
    if age < 0:
        return "future_version"
    if age <= config.max_age:
        return "fresh"
    if age > config.hard_max_age or config.mode == "drop":
        return "drop"
    return "weight"


def importance_weight(current: list[float], served: list[float], cap: float) -> float:
    """min(cap, exp(mean(current - served))) over the sampled tokens' logprobs under the current and serving policy."""
    if len(current) != len(served):
        raise ValueError(f"{len(current)} current logprobs for {len(served)} served logprobs")
    if not current:
        return 0.0
    mean = sum(c - s for c, s in zip(current, served, strict=True)) / len(current)
    return min(cap, math.exp(min(mean, 50.0)))
