"""What the grader needs from the rollout's runtime before it grades: no process of the rollout left, and a word
in the log when the runtime cannot keep the box clean.

`reap` kills every process the rollout started in its box (`composer_prime.reaper`), including daemons that
escaped with `setsid`/`nohup`; a process that survived the agent could otherwise rewrite the tree while the tests
run (re-create a `conftest.py` the grader just removed).
"""

from __future__ import annotations

import logging

import verifiers.v1 as vf

logger = logging.getLogger(__name__)
_warned: set[str] = set()


async def reap(runtime: vf.Runtime) -> None:
    """Kill every process the rollout started in `runtime`'s box."""


def warn_on_subprocess(runtime: vf.Runtime, message: str) -> None:
    """Log `message` once per process when `runtime` is the subprocess runtime (a host folder, not a sandbox)."""
    if type(runtime).__name__ == "SubprocessRuntime" and message not in _warned:
        _warned.add(message)
        logger.warning(message)
