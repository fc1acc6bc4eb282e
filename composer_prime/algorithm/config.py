"""`[orchestrator.algo] type = "composer"`: the settings of the composer algorithm, with no PRIME-RL import.

PRIME-RL's own config class for the algorithm (`composer_prime/seam/algorithm.py`) inherits these fields next to
PRIME-RL's `BaseAlgoConfig` (sampling, loss routing); the pure core (`credit.py`, `hints.py`) reads only what is here, so it
runs and is tested without PRIME-RL. Defaults rest on the evidence in docs/loss.md ("Choosing hint_coef") and
docs/evidence.md (the learning benchmark's CPU table).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TargetKind = Literal["teacher_hint", "edit_then_failure", "tool_error", "test_failure"]
"""Evidence that makes a step a hint target (`composer_prime.evidence`, plus a teacher's hint on the step)."""

HintKind = Literal["teacher_hint", "edit_then_failure", "tool_error", "test_failure", "sibling"]
"""Where a hint's text comes from: a target kind above, or a successful sibling trace (`hints.siblings`)."""

Aggregation = Literal["mean", "weighted_mean", "median", "min"]

DEFAULT_TEMPLATES: dict[str, str] = {
    "teacher_hint": "A reviewer of this step says: {detail}",
    "edit_then_failure": (
        "Hint: the change you are about to make leads to this failure when the tests run:\n{detail}\n"
        "Make the change so that these tests pass."
    ),
    "tool_error": "Hint: the tool call you are about to make fails with:\n{detail}\nMake a call that works.",
    "test_failure": "Hint: the tests fail at this point with:\n{detail}\nFix the cause before running them again.",
    "sibling": "Another attempt at this same task succeeded. What it did:\n{detail}",
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutcomeConfig(_Section):
    """Channel 1: the verifiable outcome advantage (Dr. GRPO, arXiv:2503.20783)."""

    coef: float = Field(1.0, ge=0)
    """Scale of the outcome advantage (reward minus the group mean). 0 turns RLVR off (replay or hints alone)."""

    normalize_std: bool = False
    """Divide by the group's reward standard deviation (GRPO). Off in Dr. GRPO: std normalisation over-weights
    groups that are nearly all-pass or all-fail. There is no length normalisation either way: the loss is a token
    sum that PRIME-RL divides by the global token count."""


class HintConfig(_Section):
    """Channel 2: hint self-distillation on the error-site message of a trace."""

    enabled: bool = True
    """Select hint targets and prefill-score them under the live policy. Off ships no reference stream. On, as in
    Composer's recipe (the launch configs in tomls/ run all three channels); `recipes/no-hint.toml` turns it off.
    docs/evidence.md's CPU table does not support the channel for its small GRU (`hints` vs `grpo`: -1.0 +- 1.7
    points of AUC, ahead on 2 seeds of 5; `full` behind `replay` on every seed, -1.3 +- 0.9) and says why that does
    not decide it for an LLM; the no-hint ablation at model scale does. The default is written in no launch config:
    a TOML key here would follow `recipes/grpo-baseline.toml` and `opsd-baseline.toml` into PRIME-RL's grpo and opsd
    configs, which refuse it, and an overlay cannot remove a key."""

    max_targets_per_trace: int = Field(2, ge=1, le=64)
    """At most this many target messages per trace, most informative first (see `kinds`). Targeting a few error
    sites, not whole failed traces, keeps the hint channel a correction: with hints on every token of failed traces
    the hint gradient dominated GRPO's by 10-20x in the evidence of docs/loss.md. In docs/evidence.md (CPU table,
    with hints on) 4 does not differ from 2 (`full-targets4` vs `full`: -0.1 +- 1.3 points of AUC) and 1 is slightly
    behind (`full-targets1`: -1.0 +- 1.0, behind on 4 seeds of 5)."""

    kinds: list[TargetKind] = Field(default_factory=lambda: ["teacher_hint", "edit_then_failure", "tool_error"])
    """Evidence that makes a step a target, in priority order (earlier kinds are picked first). `test_failure` is
    off by default: the step that runs the tests is rarely the one that is wrong; `edit_then_failure` targets the
    edit before it with the failure's output."""

    templates: dict[HintKind, str] = Field(default_factory=dict)
    """Hint text per kind, overriding the built-in template; `{detail}` receives the evidence (the error text or the
    failing test output, trimmed). A teacher's own hint is used verbatim through the `teacher_hint` template."""

    siblings: bool = False
    """Also hint failed traces from a successful sibling of their group (SDPO's implicit feedback, Hübotter et al.,
    arXiv 2601.20802; `composer_prime/algorithm/siblings.py`): in a group where some trace reached
    `sibling_min_reward`, each trace below it gets `sibling_targets_per_trace` more targets on its latest steps that
    hold no hint yet, beside its own (teacher and evidence) targets, the hint being what the sibling did (its diff,
    `trace.info["patch"]`, else its message at the same turn). A group without a success keeps the other sources
    only. Scored at group time, after the episodes' own hints, under its own `score_timeout_s` deadline (so a dead pool
    can hold a group up to twice that); its share is `composer/algo/hint/sibling_targets` over all targets. Off by
    default: in docs/evidence.md's CPU table `full-sibling` is level with `full` (+0.2 +- 0.9 points of AUC, ahead on
    3 seeds of 5) and `hints-sibling` behind `hints` (-1.1 +- 2.0, 1 of 5)."""

    sibling_targets_per_trace: int = Field(1, ge=1, le=64)
    """Sibling-hint targets per failed trace, on top of `max_targets_per_trace`."""

    sibling_min_reward: float = Field(1.0, allow_inf_nan=False)
    """The reward at or above which a trace counts as a success for `siblings` (1.0: solved)."""

    placement: Literal["before_target", "system_prefix"] = "before_target"
    """Where the hint goes in the scored context. `before_target`: a message inserted just before the target
    message (Composer's placement; the prefix up to it is the sampled context, so a prefix cache holds it and only
    hint + target are new tokens). `system_prefix`: a system message before the whole branch, as PRIME-RL's `opsd`
    renders its demonstration (no prefix-cache reuse)."""

    role: Literal["user", "system"] = "user"
    """Role of the inserted hint message with `placement = "before_target"`."""

    max_hint_chars: int = Field(2000, ge=64)
    """Hint text is cut to this many characters (evidence keeps failing lines and the output's tail)."""

    score_timeout_s: float = Field(120.0, gt=0)
    """Deadline of each target's prefill score, from the moment its episode reaches the algorithm: it covers the
    wait for one of the `max_concurrent_scores` slots and the request. A target past it keeps no hint and is counted
    (`composer/algo/hint/skipped/queue_timeout` or `.../score_timeout`), as a failed score is (`score_failed`,
    `bad_score`); it never fails the episode, and a group waits at most this long after its last episode arrived."""

    max_concurrent_scores: int = Field(16, ge=1, le=4096)
    """Prefill-score requests in flight at once, across all the episodes the orchestrator is scoring (one limit per
    train env's algorithm). Episodes score in the background of PRIME-RL's episode consumer
    (`composer_prime/algorithm/scoring.py`); this bounds the load they put on the policy pool beside rollouts."""

    @model_validator(mode="after")
    def _check_templates(self) -> HintConfig:
        for kind, template in self.templates.items():
            if "{detail}" not in template:
                raise ValueError(
                    f"hints.templates.{kind} = {template!r} has no {{detail}} placeholder; add {{detail}} where the "
                    "evidence (error text or failing test output) should go"
                )
        if len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"hints.kinds = {self.kinds} lists a kind twice; list each kind once, in priority order")
        return self

    def template(self, kind: str) -> str:
        return self.templates.get(kind, DEFAULT_TEMPLATES[kind])  # type: ignore[call-overload]


class ReplayConfig(_Section):
    """Channel 3: per-step credit from N frozen teachers' verdicts (`trace.info["teacher"]`, the teacher hook)."""

    enabled: bool = True
    """Fold teacher verdicts into the advantages. A trace without `info["teacher"]` gets outcome credit only."""

    replay_coef: float = Field(0.5, ge=0)
    """Per-token advantage of a scored step is `A_outcome + replay_coef * A_step`, with `A_step` the aggregate
    teacher score in [-1, 1]. 0.5 keeps a unanimous verdict at half a pass/fail swing of a group of mixed outcomes;
    at 0.5 replay is the channel that beats GRPO in docs/evidence.md (CPU table, row `replay`: +5.9 +- 1.0 points of
    AUC over `grpo`, ahead on every seed, +20 points on 5 seeds of 5 against GRPO's 3); other values were not
    measured."""

    aggregate: Aggregation = "mean"
    """How teachers' scores of one step combine: `mean`, `weighted_mean` (by each teacher's `weight` in the info
    block, 1.0 when absent), `median`, or `min` (the harshest verdict)."""

    min_teachers: int = Field(1, ge=1)
    """A step needs verdicts from at least this many teachers to be credited."""

    min_agreement: float = Field(0.5, ge=0, le=1)
    """A step is credited only when at least this fraction of its teachers give a score of the aggregate's sign
    (0 counts as agreeing with 0). 1.0 requires unanimity."""


class ComposerAlgoConfig(_Section):
    """The composer algorithm: outcome advantage (RLVR), targeted hint self-distillation, trace-replay credit."""

    type: Literal["composer"] = "composer"
    """Composer (Cursor, 2025-2026): RLVR + targeted hints + trace replay. Produces the three streams that
    `composer_prime.loss.composer_loss` consumes (docs/design.md, "The three channels on the wire")."""

    outcome: OutcomeConfig = OutcomeConfig()
    """Channel 1: the outcome advantage."""

    hints: HintConfig = HintConfig()
    """Channel 2: hint targets and their prefill scoring."""

    replay: ReplayConfig = ReplayConfig()
    """Channel 3: teacher verdicts folded into per-step advantages."""
