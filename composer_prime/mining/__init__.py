"""Feature Deletion task mining: turn a tested Python repository into re-implementation tasks.

The algorithm, one responsibility per module:

1. `testrun`: run the repository's pytest suite (any launcher that accepts pytest arguments) with a timeout and
   read per-test outcomes from its `-rA` summary (`composer_prime.pytest_outcomes`). The baseline must pass.
2. `features`: list candidate features from the source files' syntax trees (top-level functions, classes, methods,
   whole modules) with their signatures and docstrings; `tracer` records which tests call each one, so only
   features that some tests (and not all tests) exercise are tried.
3. `deletion`: remove one feature so that the rest still imports: the definition goes, `from m import name`
   aliases and `__all__` entries that name it go too.
4. `miner`: run the suite on the deleted tree; keep the task when the feature's tests now fail (FAIL_TO_PASS),
   every other baseline test still passes (PASS_TO_PASS) and neither set is empty. The gold patch (`patch`)
   restores the deleted code.
5. `snapshot`: the agent-visible tree as a fresh single-commit git repository, without bytecode, tool caches,
   build folders, the held-out test files or any copy of the deleted code (checked, git objects included).
6. `prompt`: what was removed (names, signatures, docstrings, call sites), never the implementation.

Rows are `record.MinedTask`; the `feature_deletion` environment loads them.
"""
