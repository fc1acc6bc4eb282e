"""What judges live sessions and cycles, as functions of the session-log records (docs/realtime.md):

- `pii`: the secrets scan: every session is scanned where it would train, and dropped on any finding;
- `reward`: the reward model over outcome signals (one number in [-1, 1] per session);
- `tampering`, `weakening`, `shell`: whether a session made a test run pass without a fix (`edits_disable_tests`);
- `dynamic`: the same question answered by running the session's code against its repository's original tests;
- `alerts`: the release monitors, each of which can hold a cycle's policy back from shipping, and the quarantine.

May import: `composer_prime.realtime` (`records`), `composer_prime.evidence`, `composer_prime.grading` (`launch`),
`composer_prime.process`, `composer_prime.pytest_outcomes`.
"""
