"""From the session-log spool to episodes and bundles (docs/realtime.md):

- `spool`: what is new in the spool since a durable cursor; `seen`: the session ids already accepted;
- `staleness`: how far behind the trained policy the serving one was; `join`: ready sessions to episodes;
- `source`, `source_config`: `realtime-sessions`, the spool as an infinite verifiers taskset PRIME-RL trains from;
- `journal`: the source's hand-out journal, exactly-once against PRIME-RL's checkpoints; `pruning`: how far back it
  must reach (PRIME-RL's checkpoints and broadcasts); `readiness`: the source's "nothing ready yet";
- `traces`: a logged session as a verifiers `Trace`.

May import: `composer_prime.realtime` (`records`, `durable`), `composer_prime.realtime.monitors`.
"""
