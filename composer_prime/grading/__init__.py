"""Grading with tests that nothing the agent writes can fool; shared by feature-deletion, swe-gym and the miner.

- `grader`: the steps of one grading in a box (clean tree, scan, canaries, trusted launcher, judgement);
- `bootstrap`: the launcher copied into the box (`python -I -S -B`, pinned `-c`/`--rootdir`, recorder plugin streaming outcomes);
- `pytest_config`: the trusted ini built from the repository's own settings;
- `tree`: manifests of the starting tree, stray-file policy and the machinery scan;
- `grade`: the one `Grade` type and the metric names;
- `stream`: the outcome stream's strict reader (a malformed line voids, nothing raises);
- `diff`: the agent's diff, computed on the host from the starting tree's bytes and the graded copy;
- `behaviour`, `replayer`, `values`: a feature's recorded calls replayed in a fresh process, judged on the host;
- `canaries`: canary tests drawn from the suite's own tests;
- `interpreter`: the grading interpreter's fingerprint, taken at setup and checked at grading;
- `launch`: the time limit, network namespace and (subprocess runtime) jail every grading process starts under;
- `runtime`: the box tag, PID namespace and jail opened at setup, the expected-side check, the host's own programs
  (`HostTools`), and the end of the rollout's processes before grading;
- `private_copy`: the copy of the tree, in a folder the agent never saw, that every grading step works on.

May import: `composer_prime.process`, `composer_prime.pytest_outcomes`.
"""

from composer_prime.grading.grade import Grade
from composer_prime.grading.grader import Baseline, Suite, grade

__all__ = ["Baseline", "Grade", "Suite", "grade"]
