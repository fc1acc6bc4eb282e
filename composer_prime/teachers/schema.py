"""The teacher hook's output, `trace.info["teacher"]`: the contract between the hook and the `composer` algorithm.

The hook writes it with `TeacherInfo.model_dump(mode="json")`; the algorithm parses it back with
`TeacherInfo.model_validate(trace.info["teacher"])`. The shape is the one in DESIGN.md:

    {"teachers": ["name", ...], "weights": {"<teacher>": <float > 0>, ...},
     "steps": [{"node": <index into trace.nodes of a sampled assistant node>,
                "scores": {"<teacher>": <float in [-1, 1]>, ...},
                "hint": "<short text>" | null}],
     "cost_usd": <float>, "skipped": "<reason>" | null, "errors": {"<teacher>": "<first error, with its URL>"}}

A step is listed only when at least one teacher answered it; a teacher missing from a step's `scores` did not
answer that step (timeout, error, unreadable verdict, budget). This module imports pydantic only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TeacherStep(BaseModel):
    """The verdicts on one sampled assistant step."""

    model_config = ConfigDict(extra="forbid")

    node: int = Field(ge=0)
    """Index into `trace.nodes` of the sampled assistant node the verdicts are about."""
    scores: dict[str, float] = Field(min_length=1)
    """Teacher name -> score in [-1, 1] (-1: the step is clearly wrong, 0: neutral, 1: clearly right)."""
    hint: str | None = None
    """A short note from a teacher on what the step should have done instead; None when no teacher gave one."""

    @model_validator(mode="after")
    def _scores_in_range(self) -> TeacherStep:
        bad = {name: score for name, score in self.scores.items() if not -1.0 <= score <= 1.0}
        if bad:
            raise ValueError(f"step at node {self.node}: scores {bad} are outside [-1, 1]")
        return self


class TeacherInfo(BaseModel):
    """Everything the hook learnt about one trace."""

    model_config = ConfigDict(extra="forbid")

    teachers: list[str]
    """The configured teachers' names, in config order (also those that never answered)."""
    weights: dict[str, float] = Field(default_factory=dict)
    """Teacher name -> its configured `weight` (> 0), for the algorithm's `weighted_mean` aggregation; a teacher
    absent here weighs 1.0."""
    steps: list[TeacherStep] = Field(default_factory=list)
    """Scored steps in trace order, at most one entry per node."""
    cost_usd: float = Field(0.0, ge=0)
    """Dollars spent on this trace (token usage times the configured prices; cache hits cost nothing)."""
    skipped: str | None = None
    """Why some or all selected steps went unscored (budget spent, deadline reached, no teachers), else None."""
    errors: dict[str, str] = Field(default_factory=dict)
    """Teacher name -> the first error of its failed queries on this trace, naming the URL it was sent to (what the
    smoke's console shows once per teacher); empty when every query was answered."""

    @model_validator(mode="after")
    def _steps_consistent(self) -> TeacherInfo:
        nodes = [step.node for step in self.steps]
        if len(set(nodes)) != len(nodes):
            raise ValueError(f"steps name a node more than once: {nodes}")
        unknown = {name for step in self.steps for name in step.scores} - set(self.teachers)
        bad_weights = {name: w for name, w in self.weights.items() if name not in self.teachers or not w > 0}
        if bad_weights:
            raise ValueError(f"weights {bad_weights} name unknown teachers or are not > 0")
        if unknown:
            raise ValueError(f"steps carry scores from teachers not in `teachers`: {sorted(unknown)}")
        return self
