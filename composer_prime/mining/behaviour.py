"""Record a feature's behaviour for its task: the calls the covering tests make into it, kept where a lone replay
answers as recorded (see `composer_prime.grading.behaviour` for how grading uses them)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from composer_prime.grading.behaviour import RecordedCall, mismatch
from composer_prime.mining.testrun import replay_calls, run_tests


def record_behaviour(
    test_cmd: list[str], work: Path, feature: dict[str, str], targets: list[str], timeout_s: float
) -> tuple[list[RecordedCall], int]:
    """Run `targets` on the original code in `work` with the recorder of calls into `feature` (`path`, `qualname`,
    `kind`), replay what it saw exactly as grading will, and return (the calls answered as recorded, how many calls
    were seen but not kept). Raises the test run's `TestCommandTimeout` / `TestCommandFailed`."""
    calls, skipped, _ = record_calls(test_cmd, work, feature, targets, timeout_s)
    kept = replayed_as_recorded(test_cmd, work, calls, timeout_s)
    return kept, skipped + len(calls) - len(kept)


def record_calls(
    test_cmd: list[str],
    work: Path,
    feature: dict,
    targets: list[str],
    timeout_s: float,
    pythonpath: list[str] | None = None,
) -> tuple[list[RecordedCall], int, dict[str, str]]:
    """Run `targets` in `work` with the behaviour recorder (`feature`: see `behaviour_plugin`); (the calls it saw,
    how many it saw without a strict form, the run's per-test outcomes)."""
    run = run_tests(test_cmd, work, timeout_s, targets=targets or None, record=feature, pythonpath=pythonpath)
    if run.behaviour is None:
        return [], 0, run.outcomes
    calls: list[RecordedCall] = []
    skipped = int(run.behaviour.get("skipped", 0))
    for raw in run.behaviour.get("calls", []):
        try:
            calls.append(RecordedCall.model_validate(raw))
        except ValidationError:
            skipped += 1
    return calls, skipped, run.outcomes


def replayed_as_recorded(
    test_cmd: list[str], work: Path, calls: list[RecordedCall], timeout_s: float, pythonpath: list[str] | None = None
) -> list[RecordedCall]:
    """The calls a lone replay against the code in `work`, exactly as grading makes it, answers as recorded."""
    answers = replay_calls(test_cmd, work, calls, timeout_s, pythonpath) if calls else []
    return [call for call, answer in zip(calls, answers, strict=True) if mismatch(call, answer) is None]


def blind(calls: list[RecordedCall]) -> str | None:
    """Why a stub that ignores its input would replay exactly as the gold code does, or None when some call tells
    them apart. Blind: every call leaves its arguments as they were and answers None, or raises one exception type (a
    stub needs no knowledge to do that: a feature whose effect is module state), or gives one value for different
    inputs (a constant)."""
    if not calls:
        return None
    if any(c.args_after != c.args or c.kwargs_after != c.kwargs for c in calls):
        return None
    answers = {json.dumps(["raised", c.raised[1]] if c.raised else c.result, sort_keys=True) for c in calls}
    if len(answers) > 1:
        return None
    first = calls[0]
    if first.raised:
        return f"raises {first.raised[1]}"
    if first.result == ["none"]:
        return "returns None"
    inputs = {json.dumps([c.args, c.kwargs], sort_keys=True) for c in calls}
    if len(inputs) > 1:  # different inputs, one answer: `return <it>` replays them all
        return f"returns the same value ({json.dumps(first.result)[:80]})"
    return None  # one input and its answer: a stub must know that answer
