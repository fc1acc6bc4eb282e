"""The reward model over outcome signals: one number in [-1, 1] per session, from what its user did afterwards.

Each signal kind gives a value in [-1, 1]; the latest signal of a kind wins (an edit kept at 5 minutes and reverted
at 30 is reverted):

- `edit`: kept +1, reverted -1 (edit persistence, the strongest signal a coding product has);
- `tests`: (passed - failed) / (passed + failed), 0 when nothing ran;
- `thumbs`: up +1, down -1;
- `undo`: -1 (a follow-up turn undid the change).

The reward is the weighted mean of the values of the kinds present, `sum(w_k v_k) / sum(w_k)` over those kinds, so
its scale does not depend on how many kinds happened to arrive. A `tests` signal is also a ceiling: a failing test
in any of the session's runs (not only the latest) makes the reward -1, the floor, so an edit that is kept but fails
its tests never earns a positive advantage (a baseline is a mean of rewards, never below -1). A run that ran no
test counts as failing (a collection error, or tests made uncollectable, reports 0 passed and 0 failed); a run that
passed caps nothing. A session with no signal is skipped (counted `no_signal`) or given `no_signal_reward`, as
configured. Weights of 0 switch a kind off.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime.records import EditSignal, SignalRecord, TestsSignal, ThumbsSignal, UndoSignal


class RewardModelConfig(BaseModel):
    """Weights of the signal kinds and what a session without signals gets."""

    model_config = ConfigDict(extra="forbid")

    edit: float = Field(1.0, ge=0)
    """Weight of edit persistence (kept +1, reverted -1)."""
    tests: float = Field(0.5, ge=0)
    """Weight of the user's own test runs ((passed - failed) / total)."""
    thumbs: float = Field(0.5, ge=0)
    """Weight of explicit feedback (up +1, down -1)."""
    undo: float = Field(1.0, ge=0)
    """Weight of a follow-up that undid the change (-1)."""
    no_signal: Literal["skip", "reward"] = "skip"
    """A session with no signal of a weighted kind: `skip` it (counted) or train it with `no_signal_reward`."""
    no_signal_reward: float = Field(0.0, ge=-1, le=1)
    """The reward of a signal-less session when `no_signal = "reward"`."""


def signal_value(signal: EditSignal | TestsSignal | ThumbsSignal | UndoSignal) -> float:
    if isinstance(signal, EditSignal):
        return 1.0 if signal.kept else -1.0
    if isinstance(signal, TestsSignal):
        total = signal.passed + signal.failed
        return (signal.passed - signal.failed) / total if total else 0.0
    if isinstance(signal, ThumbsSignal):
        return 1.0 if signal.up else -1.0
    return -1.0


def session_reward(signals: list[SignalRecord], config: RewardModelConfig) -> float | None:
    """The session's reward, or None when it has no weighted signal and `no_signal = "skip"`."""
    latest: dict[str, SignalRecord] = {}
    for record in sorted(signals, key=lambda r: r.at):
        latest[record.signal.type] = record
    total = weight = 0.0
    for kind, record in latest.items():
        w = float(getattr(config, kind))
        total += w * signal_value(record.signal)
        weight += w
    if weight == 0.0:
        return None if config.no_signal == "skip" else config.no_signal_reward
    value = total / weight
    tests = latest.get("tests")
    if tests is not None and config.tests > 0:
        # The user's own test runs are a ceiling. A failing test in any of them puts the reward at the floor (a kept
        # edit with 3 of 4 tests passing would otherwise score (1 + 0.25) / 1.5 = +0.83 and beat a baseline of
        # reverted edits); not only the latest run counts, or a one-test rerun after a failing run would pass; and a
        # run of no test is a failing one (a collection error reports 0 / 0).
        if any(isinstance(r.signal, TestsSignal) and (r.signal.failed > 0 or r.signal.passed == 0) for r in signals):
            return -1.0
    return value
