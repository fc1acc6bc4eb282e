"""The cadence of `composer-prime realtime` (docs/realtime.md):

- `runner`: ingest -> train -> evaluate held-out -> ship if the gates pass, resumable after a crash at any point;
- `cluster`: the train phase through PRIME-RL on a cluster; `cpu`: the same through PRIME-RL on this machine's CPUs
  (the demo with `--demo.prime-rl`, through `composer_prime.local`);
- `trainer`, `policy`: the single-process trainer without PRIME-RL and the trained policy with its checkpoints;
- `demo`: the CPU demonstration's product and scripted users; `replay`: the replay env and harness of the source;
- `config`, `command`: `composer-prime realtime`'s settings and entry point.

May import: `composer_prime.realtime` (`records`, `durable`), `composer_prime.realtime.monitors`,
`composer_prime.realtime.ingest`, `composer_prime.local`, `composer_prime.process`, `composer_prime.atomic`,
`composer_prime.loss`, `composer_prime.loss_config`, `composer_prime.cli`, `composer_prime.relay` (`signing`:
the owner-only check of the admin token file).
"""
