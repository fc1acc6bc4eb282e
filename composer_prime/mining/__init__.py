"""Feature Deletion task mining: turn a tested Python repository into re-implementation tasks.

The algorithm, one responsibility per module:

1. `testrun`: run the repository's pytest suite through the grader's launcher (`composer_prime.grading`: trusted
   ini, network namespace with loopback) with a timeout, and read per-test outcomes from its recorder. Tests that
   fail at baseline are excluded from every task.
2. `features`: list candidate features from the source files' syntax trees (top-level functions, classes, methods,
   whole modules) with their signatures and docstrings; `tracer` records which tests call each one, so only
   features that some tests (and not all tests) exercise are tried.
3. `deletion`: remove one feature so that the rest still imports: the definition goes, `from m import name`
   aliases and `__all__` entries that name it are cut out of the source text (formatting kept). `copies` refuses a
   feature whose code mostly reappears elsewhere (token-shingle overlap).
4. `miner`: run the suite on the deleted tree; keep the task when the feature's tests now fail (FAIL_TO_PASS),
   every other baseline test still passes (PASS_TO_PASS) and neither set is empty. The gold patch (`patch`)
   restores the deleted code.
5. `snapshot`: the scrubbed repository state (no bytecode, tool caches or build folders), packed once beside the
   tasks file; a row holds the deletion's changes and the held-out test files, and no visible file may hold the
   deleted code.
6. `prompt`: what was removed (names, signatures, docstrings, call sites), never the implementation.

Rows are `record.MinedTask`; the `feature_deletion` environment loads them. `box` runs the miner's pytest in a
container (`testrun.RUNTIME`) when the repository lives in an image (`composer_prime.corpus`); `behaviour`,
`behaviour_plugin` and `trace_plugin` record what the features' tests call, for the grader's replay.

The corpus pipeline (many packages, each in an image of its own, built into a Hugging Face dataset) is
`composer_prime.corpus`, which uses this package; nothing here imports it.

May import: `composer_prime.grading`, `composer_prime.process`, `composer_prime.atomic`,
`composer_prime.pytest_outcomes`, `composer_prime.cli`.
"""
