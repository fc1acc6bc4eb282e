"""A train source with nothing ready yet, on PRIME-RL's event loop (docs/realtime.md, "The PRIME-RL source").

PRIME-RL 559b447 draws a train task synchronously on its orchestrator's event loop: the dispatch loop
(`Dispatcher.start`) calls `fill_inflight`, which calls `TrainSource.next_task`, which calls `next()` on the env's
curriculum sampler, which calls `next()` on the taskset's iterator. An infinite taskset fed by live data (the
`realtime-sessions` spool) has no task to give while nothing has arrived; waiting inside `next()` would stop the whole
orchestrator (finished episodes unprocessed, batches unshipped, logging and weight-sync bookkeeping paused) until data
lands, and `fill_inflight` keeps drawing until its permits are spent, so it would wait for a full window of bundles.

The dispatcher already has the answer for a source with nothing to give: `next_fresh_group` returns None when the
source returns None ("source is empty", used by the eval source), `fill_inflight` returns, and the dispatch loop
comes round again within 0.1-0.5 s. Only `TrainSource.next_task` cannot say it: it wraps `next(sampler)` in a
`TaskRequest` unconditionally. So:

- the taskset's iterator raises `TaskNotReady` (`composer_prime.realtime.ingest.readiness`) from `__next__` when
  nothing is ready; it stays usable (it is an iterator object, not a generator, which an exception would end), and PRIME-RL's
  `StandardSampler.__next__` counts a draw only after `next()` returned, so its checkpointed cursor counts tasks,
  never "not ready" answers;
- `patch_train_source` (applied by the import hook when `prime_rl.orchestrator.train_source` loads) makes
  `TrainSource.next_task` answer None when the env it picked raises `TaskNotReady`, after trying the other envs by
  their ratios. When every env has a task the method makes exactly the draws PRIME-RL's does (one `rng.choices` over
  all envs), so its checkpointed rng state is unchanged.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from composer_prime.realtime.ingest.readiness import TaskNotReady
from composer_prime.seam.errors import seam_moved


def patch_train_source(module: ModuleType) -> None:
    """Make `module.TrainSource.next_task` (PRIME-RL's `prime_rl.orchestrator.train_source`) return None while no
    env it may draw from has a task ready. Idempotent."""
    source = getattr(module, "TrainSource", None)
    request = getattr(module, "TaskRequest", None)
    if source is None or request is None or not callable(getattr(source, "next_task", None)):
        raise seam_moved("prime_rl.orchestrator.train_source has no TrainSource.next_task or TaskRequest")
    if getattr(source.next_task, "waits_for_tasks", False):
        return

    def next_task(self: Any, *, step: int) -> Any:
        names, weights = list(self.env_names), list(self.weights)
        while names and sum(weights) > 0:
            env_name = self.rng.choices(names, weights=weights, k=1)[0]
            try:
                task = next(self.curricula[env_name].sampler)
            except TaskNotReady:
                i = names.index(env_name)
                del names[i], weights[i]
                continue
            return request(env_name=env_name, task=task, step=step)
        return None  # the dispatcher's "source is empty": it comes round again on its next pass

    next_task.waits_for_tasks = True  # type: ignore[attr-defined]
    next_task.__doc__ = "PRIME-RL's draw, or None while no env has a task ready (composer-prime, seam/train_source.py)."
    source.next_task = next_task
