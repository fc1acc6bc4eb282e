"""The teacher hook: N frozen teachers replay a finished trace and score its selected steps.

`score_trace(trace, config)`:
1. reads the trace's sampled steps and their failure evidence (`composer_prime.evidence.steps`) and picks the steps
   worth a verdict (`gating.select`);
2. builds one prompt per step (`prompts.step_messages`: task, compacted trajectory, the step, its tool output) and
   asks every teacher about every selected step concurrently, failure steps first; each query is answered from the
   cache when it can be, else sent only when its worst-case cost fits the budget, under the teacher's concurrency
   bound; an unreadable verdict is asked again once with a stricter instruction, then dropped;
3. stops at its deadline (its own limit, and the rollout's scoring timeout minus a margin), keeping what was
   answered, and returns the `TeacherInfo` block, metrics and the weighted mean score.

It never raises: any failure becomes a `skipped` reason, so a teacher outage never costs a rollout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from composer_prime import evidence
from composer_prime.teachers import client
from composer_prime.teachers.budget import TraceBudget
from composer_prime.teachers.cache import AnswerCache, cache_key
from composer_prime.teachers.config import TeacherConfig, TeachersConfig
from composer_prime.teachers.gating import select
from composer_prime.teachers.prompts import (
    Rendered,
    Verdict,
    message_text,
    parse_verdict,
    step_messages,
)
from composer_prime.teachers.schema import TeacherInfo, TeacherStep
from composer_prime.text import estimate_tokens

logger = logging.getLogger(__name__)

METRIC_PREFIX = "composer/teacher/"
RESERVE_FACTOR = 1.5
"""The budget reserves the prompt at 1.5x its 4-characters-per-token estimate (code tokenizes denser than prose),
so that the billed cost stays under the reservation and a ceiling holds."""


@dataclass
class Tally:
    """Counts over one trace's queries."""

    queries: int = 0
    cache_hits: int = 0
    unparseable: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)
    """Teacher name -> its first failed query's error, with the URL it was sent to."""


@dataclass
class Report:
    info: TeacherInfo
    metrics: dict[str, float]
    score: float
    """Weighted mean over scored steps of the teachers' weighted mean score; 0.0 when nothing was scored."""


@dataclass(frozen=True)
class StepPrompt:
    node: int
    task: str
    history: list[Rendered]
    action: Rendered
    outcome: list[Rendered]


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def task_text(trace: Any) -> str:
    data = _get(_get(trace, "task"), "data")
    prompt = _get(data, "prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(message_text(m).text for m in prompt if message_text(m).role == "user")
    return ""


def step_prompt(trace: Any, node: int, children: dict[int, list[int]], task: str) -> StepPrompt:
    """The context of `node` from its parent chain, and the tool messages answering it."""
    nodes = trace.nodes
    path: list[int] = []
    cursor = _get(nodes[node], "parent")
    while cursor is not None and len(path) < len(nodes):  # bounded: a malformed graph may cycle
        path.append(cursor)
        cursor = _get(nodes[cursor], "parent")
    history = [message_text(_get(nodes[i], "message")) for i in reversed(path)]
    history = [m for m in history if m.role != "system"]
    if not task and history and history[0].role == "user":
        task = history[0].text
    if history and history[0].role == "user" and history[0].text == task:
        history = history[1:]
    outcome: list[Rendered] = []
    cursor = node
    while len(outcome) < len(nodes):
        tools = [c for c in children.get(cursor, []) if message_text(_get(nodes[c], "message")).role == "tool"]
        if not tools:
            break
        cursor = tools[0]
        outcome.append(message_text(_get(nodes[cursor], "message")))
    return StepPrompt(node, task, history, message_text(_get(nodes[node], "message")), outcome)


def time_left(trace: Any, config: TeachersConfig) -> float:
    """Seconds the hook may run: its own limit, capped by the rollout's scoring timeout minus the margin."""
    limit = config.deadline_s
    timeout = _get(_get(_get(_get(trace, "agent"), "config"), "timeout"), "scoring")
    if timeout is None:
        timeout = _get(_get(_get(_get(trace, "task"), "data"), "timeout"), "scoring")
    started = _get(_get(_get(trace, "timing"), "scoring"), "start")
    if timeout is not None:
        elapsed = time.time() - started if started else 0.0
        limit = min(limit, timeout - elapsed - config.margin_s)
    return limit


class Replay:
    """One trace's queries: cache, budget, bounded concurrency, one strict retry per unreadable answer."""

    def __init__(self, config: TeachersConfig):
        self.config = config
        self.cache = AnswerCache(config.cache_dir)
        self.budget = TraceBudget(config.budget)
        self.tally = Tally()
        self.verdicts: dict[tuple[int, str], Verdict] = {}

    async def query(self, teacher: TeacherConfig, messages: list[dict[str, str]]) -> str | None:
        """The answer text, from the cache or the teacher; None when refused by the budget or failed."""
        key = cache_key(teacher.name, teacher.model, messages)
        if (cached := self.cache.get(key)) is not None:
            self.tally.cache_hits += 1
            return cached.text
        async with client.semaphore(teacher):
            reserved = teacher.cost_usd(int(estimate_tokens(messages) * RESERVE_FACTOR), teacher.max_output_tokens)
            if not self.budget.reserve(reserved):
                return None
            billed = reserved  # a query cancelled in flight may have been billed: count its worst case
            try:
                self.tally.queries += 1
                answer = await client.ask(teacher, messages)
                billed = teacher.cost_usd(answer.input_tokens, answer.output_tokens)
            except client.TeacherError as e:
                billed = 0.0
                self.tally.failed += 1
                self.tally.errors[teacher.name] += 1
                self.tally.first_error.setdefault(teacher.name, f"{where(teacher)}: {e}")
                logger.debug("teacher hook: %s", e)
                return None
            finally:
                self.budget.settle(reserved, billed)
        self.tally.input_tokens += answer.input_tokens
        self.tally.output_tokens += answer.output_tokens
        self.cache.put(key, answer)
        return answer.text

    async def verdict(self, teacher: TeacherConfig, step: StepPrompt) -> None:
        for strict in (False, True):
            messages = step_messages(step.task, step.history, step.action, step.outcome, self.config.context, strict)
            text = await self.query(teacher, messages)
            if text is None:
                return
            if (verdict := parse_verdict(text)) is not None:
                self.verdicts[(step.node, teacher.name)] = verdict
                return
        self.tally.unparseable += 1


def where(teacher: TeacherConfig) -> str:
    """The API root a teacher's queries go to (`$base_url_var` or `base_url`), as it is configured."""
    try:
        return teacher.endpoint()
    except ValueError:  # a malformed $base_url_var: the error itself names it
        return f"${teacher.base_url_var}"


def agreement(scores: list[list[float]]) -> float | None:
    """Mean over steps with two or more verdicts of 1 - mean pairwise |s_i - s_j| / 2 (1: identical, 0: opposite)."""
    per_step = [
        1.0 - sum(abs(a - b) for a, b in combinations(s, 2)) / (len(s) * (len(s) - 1) / 2) / 2
        for s in scores
        if len(s) >= 2
    ]
    return sum(per_step) / len(per_step) if per_step else None


def assemble(config: TeachersConfig, order: list[int], replay: Replay, skipped: list[str]) -> Report:
    weights = {t.name: t.weight for t in config.teachers}
    steps: list[TeacherStep] = []
    means: list[float] = []
    for node in sorted(order):
        answered = {
            t.name: replay.verdicts[(node, t.name)] for t in config.teachers if (node, t.name) in replay.verdicts
        }
        if not answered:
            continue
        hinted = [(v.score, -weights[n], v.hint) for n, v in answered.items() if v.hint]
        hint = min(hinted)[2] if hinted else None
        steps.append(TeacherStep(node=node, scores={n: v.score for n, v in answered.items()}, hint=hint))
        total = sum(weights[n] for n in answered)
        means.append(sum(weights[n] * v.score for n, v in answered.items()) / total)
    tally = replay.tally
    if tally.errors:
        logger.warning("teacher hook: queries failed on a trace, by teacher: %s", dict(tally.errors))
    if replay.budget.refused:
        skipped.append(f"budget spent: {replay.budget.refused} queries not sent")
    info = TeacherInfo(
        teachers=[t.name for t in config.teachers],
        weights=weights,
        steps=steps,
        cost_usd=round(replay.budget.billed, 8),
        skipped="; ".join(skipped) or None,
        errors=dict(tally.first_error),
    )
    answered_by = {name for step in steps for name in step.scores}
    agree = agreement([list(step.scores.values()) for step in steps])
    score = sum(means) / len(means) if means else 0.0
    metrics = {
        "steps_selected": len(order),
        "steps_scored": len(steps),
        "teachers_answered": len(answered_by),
        "queries": tally.queries,
        "cache_hits": tally.cache_hits,
        "unparseable": tally.unparseable,
        "failed": tally.failed,
        "budget_refused": replay.budget.refused,
        "input_tokens": tally.input_tokens,
        "output_tokens": tally.output_tokens,
        "cost_usd": info.cost_usd,
        "mean_score": score,
    }
    if agree is not None:
        metrics["agreement"] = agree
    return Report(info, {METRIC_PREFIX + k: float(v) for k, v in metrics.items()}, score)


async def score_trace(trace: Any, config: TeachersConfig) -> Report:
    """Score the selected steps of `trace` with every configured teacher. Never raises."""
    replay = Replay(config)
    order: list[int] = []
    skipped: list[str] = []
    jobs: list[asyncio.Task[None]] = []
    try:
        if not config.teachers:
            return assemble(config, order, replay, ["no teachers configured"])
        chosen = select(evidence.steps(trace), config.gating)
        order = [step.node for step in chosen]
        limit = time_left(trace, config)
        if limit <= 0:
            return assemble(config, order, replay, ["no time left before the scoring timeout"])
        children: dict[int, list[int]] = {}
        for i, node in enumerate(trace.nodes):
            if (parent := _get(node, "parent")) is not None:
                children.setdefault(parent, []).append(i)
        task = task_text(trace)
        prompts = [step_prompt(trace, node, children, task) for node in order]
        jobs += [
            asyncio.create_task(replay.verdict(teacher, prompt)) for prompt in prompts for teacher in config.teachers
        ]
        done, pending = await asyncio.wait(jobs, timeout=limit)
        for job in pending:
            job.cancel()
        if pending:
            await asyncio.wait(pending)
            skipped.append(f"deadline of {limit:.0f}s reached: {len(pending)} queries unanswered")
        for job in done:
            if job.exception() is not None:
                raise job.exception()
        return assemble(config, order, replay, skipped)
    except Exception as e:
        logger.exception("teacher hook failed on a trace")
        try:
            return assemble(config, order, replay, [*skipped, f"hook error: {type(e).__name__}: {e}"[:300]])
        except Exception:  # noqa: BLE001
            return Report(TeacherInfo(teachers=[t.name for t in config.teachers], skipped="hook error"), {}, 0.0)
    finally:
        for job in jobs:  # also when the caller cancels scoring: no query outlives the hook
            job.cancel()
