"""realtime-sessions: live session logs as a PRIME-RL train source (taskset id `realtime-sessions`).

verifiers resolves a taskset id to a top-level module; the source lives in `composer_prime.realtime` (`source.py`,
`replay.py`, docs/realtime.md). The module also exports the replay harness, which verifiers makes the taskset's
default, and the replay env, which it makes the taskset's env (one trace per session of a bundle).
"""

from composer_prime.realtime.cycle.replay import ReplayEnv, ReplayHarness
from composer_prime.realtime.ingest.source import RealtimeSessionsTaskset

__all__ = ["RealtimeSessionsTaskset", "ReplayEnv", "ReplayHarness"]
