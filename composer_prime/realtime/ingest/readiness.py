"""The realtime taskset's answer "no task is ready yet" (docs/realtime.md, "The PRIME-RL source").

An infinite taskset fed by live data (the `realtime-sessions` spool) raises `TaskNotReady` from its iterator's
`__next__` while nothing has arrived, instead of waiting inside `next()` on PRIME-RL's orchestrator event loop.
PRIME-RL's `TrainSource.next_task` turns it into "source is empty" once composer-prime's seam has patched it
(`composer_prime/seam/train_source.py`); this module imports nothing, so the taskset side never loads the seam.
"""


class TaskNotReady(Exception):
    """No task is ready yet; the iterator that raised it is still usable, and nothing was drawn. Try again later."""
