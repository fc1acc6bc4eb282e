"""Real-time RL: train on the sessions a served policy had with its users, ship a new policy on a fixed cadence.

A serving product appends session logs and the outcome signals that arrive later (edit kept or reverted, tests the
user ran, thumbs, a follow-up that undoes the change) to a spool of JSONL files (`records`). Each cycle reads what
is new since a durable cursor (`ingest.spool`), joins late signals to their sessions and turns them into episodes
with a reward (`ingest.join`, `monitors.reward`), keeps on-policy discipline by policy version (`ingest.staleness`),
trains, evaluates on held-out tasks, and ships through the weight relay unless a monitor holds the release
(`monitors.alerts`, `cycle.runner`). docs/realtime.md describes the format, the seams and the guarantees.

The rooms, each importing only the ones listed before it:

- here: `records` (the session-log format) and `durable` (the one way the loop writes and reads its durable files);
- `monitors/`: what judges a session or a cycle: the secrets scan (`pii`), the reward model (`reward`), the
  test-tampering detector (`tampering`, `weakening`, `shell`) and the release monitors (`alerts`);
- `ingest/`: the spool to episodes and bundles: `spool`, `seen`, `staleness`, `join`, the `realtime-sessions`
  taskset (`source`, `source_config`), its journal (`journal`, `pruning`, `readiness`) and the sessions as traces
  (`traces`);
- `cycle/`: the cadence: `runner` (ingest, train, evaluate, ship), the PRIME-RL train phase on a cluster
  (`cluster`) and on this CPU (`cpu`), the single-process trainer (`trainer`, `policy`), the CPU demo (`demo`), the
  replay env and harness (`replay`), and `composer-prime realtime` itself (`config`, `command`).

Importing the package is cheap: torch and transformers load only inside the cycle's train and demo parts.

May import: `composer_prime.atomic`.
"""
