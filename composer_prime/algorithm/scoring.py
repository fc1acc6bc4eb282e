"""Hint scoring off the path of PRIME-RL's episode consumer: episodes score concurrently, bounded, each with a deadline.

PRIME-RL's orchestrator consumes finished episodes one at a time (`Orchestrator.main_loop` awaits
`TrainSink.add(episode)`, which awaits `Algorithm.finalize_episode` -> `score_episode`), so an algorithm that awaits
its prefill scores inside `score_episode` holds up every episode behind it: N episodes with one target each cost N
round trips to the policy pool, one after the other. The references are first read when the group is compiled into
training samples (`TrainSink.process_group`, after `finalize_group` -> `score_group`), so the composer algorithm
only starts an episode's scoring in `score_episode` and waits for it in `score_group`:

- `start(key, traces)` begins `annotate_hints` for one episode as a task and returns at once;
- `wait(keys)` awaits the tasks of a group's episodes (those already done cost nothing);
- every prefill request of every episode goes through one semaphore of `hints.max_concurrent_scores` slots;
- each target has a deadline of `hints.score_timeout_s` from its episode's start, covering the wait for a slot and
  the request itself. A target past it keeps no reference and is counted (`composer/algo/hint/skipped/
  queue_timeout` when it never got a slot, `.../score_timeout` when the pool did not answer in time), so `wait`
  returns at most `score_timeout_s` after the group's last episode arrived, whatever the pool does.

An episode that never reaches `score_group` (a stale or rejected group) finishes its scoring in the background
within the same deadline and is forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from composer_prime.algorithm.hints import HintStats, annotate_hints
from composer_prime.algorithm.siblings import annotate_siblings

logger = logging.getLogger(__name__)

ERROR_METRIC = "composer/algo/hint/skipped/scoring_error"
"""Set on every trace of an episode whose scoring raised (a bug, not a pool failure: those are counted per target)."""


class HintScoring:
    """Background hint scoring of whole episodes, shared by every episode one algorithm instance sees."""

    def __init__(
        self,
        config: Any,
        render: Callable[[str, str], list[int]],
        score: Callable[[list[int]], Awaitable[list[float]]],
    ):
        self.config = config
        """A `ComposerAlgoConfig`."""
        self.render = render
        self.score = score
        self._gate: asyncio.Semaphore | None = None
        self._tasks: dict[str, asyncio.Task[list[HintStats]]] = {}

    @property
    def in_flight(self) -> int:
        """Episodes whose scoring has started and not finished."""
        return len(self._tasks)

    def start(self, key: str, traces: list[Any]) -> None:
        """Begin scoring one episode's traces; returns at once (and does nothing while `key` is still being scored).
        Must be called inside the running event loop."""
        if not self.config.hints.enabled or not traces or key in self._tasks:
            return
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.config.hints.max_concurrent_scores)
        task = asyncio.create_task(self._run(traces, self._gate), name=f"composer-hints-{key}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def wait(self, keys: Iterable[str]) -> None:
        """Return when the scoring of every episode in `keys` has finished (unknown or finished keys are skipped)."""
        pending = [task for key in keys if (task := self._tasks.get(key)) is not None]
        if pending:
            await asyncio.gather(*pending)

    async def siblings(self, traces: list[Any], rewards: list[float]) -> list[HintStats]:
        """Sibling hints of one whole group (`siblings.py`), through the same request limit; never raises."""
        if not (self.config.hints.enabled and self.config.hints.siblings):
            return [HintStats() for _ in traces]
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.config.hints.max_concurrent_scores)
        try:
            return await annotate_siblings(traces, rewards, self.config.hints, self.render, self.score, self._gate)
        except Exception:  # noqa: BLE001 - as for an episode's own hints
            logger.exception("composer sibling hint scoring raised; the group keeps its other hints")
            for trace in traces:
                trace.metrics[ERROR_METRIC] = 1.0
            return [HintStats() for _ in traces]

    async def _run(self, traces: list[Any], gate: asyncio.Semaphore) -> list[HintStats]:
        try:
            return await annotate_hints(traces, self.config, self.render, self.score, gate=gate)
        except Exception:  # noqa: BLE001 - scoring never fails an episode; counted on its traces and logged
            logger.exception("composer hint scoring raised; the episode's traces keep no hint reference")
            for trace in traces:
                trace.metrics[ERROR_METRIC] = 1.0
            return [HintStats() for _ in traces]
