"""One grade type and one metric vocabulary for every environment that grades with tests.

Metric names (the same quantity has the same name in feature-deletion and swe-gym):

- `fail_to_pass`: fraction of FAIL_TO_PASS tests that pass;
- `pass_to_pass`: fraction of PASS_TO_PASS tests that still pass;
- `network_isolated`: 1.0 when the tests ran in a network namespace of their own;
- `process_isolated`: 1.0 when the agent's commands ran in a PID namespace killed whole before grading and the tree
  was graded as a private copy (`grading.runtime.end_rollout`, `grading.private_copy`);
- `timed_out`: 1.0 when the run hit its limit and was killed;
- `void`: 1.0 when a canary came back wrong, the outcome stream was tampered with or the diff scan found test machinery;
- `replay`: fraction of the recorded calls (feature-deletion: into the deleted feature; swe-gym: the FAIL_TO_PASS
  tests' calls into the package, with the gold patch; in both, the PASS_TO_PASS tests' calls into the source files
  that the task leaves alone) the candidate answered as the gold code did (1.0 where nothing was recorded);
- `replay_used`: 1.0 when calls of the feature (swe-gym: of a usable oracle) were replayed, not only PASS_TO_PASS
  calls.

The reward `solved` is 1.0 iff the grade has no error, is not void, did not time out, and both fractions and `replay`
are 1.0.
A test counts as passed only when its outcome is PASSED, or the outcome it had at baseline (a test that was XFAIL or
SKIPPED before the agent ran may be so again): `pytest.xfail()`, `pytest.skip()` and an XPASS are not passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict


class Grade(BaseModel):
    """What grading found. `error`: the tests could not be judged; `void`: they were judged but not trusted."""

    model_config = ConfigDict(extra="forbid")

    fail_to_pass: float = 0.0
    """Fraction of FAIL_TO_PASS tests that passed (PASSED, or their baseline outcome)."""
    pass_to_pass: float = 0.0
    """Fraction of PASS_TO_PASS tests that still pass (PASSED, or their baseline outcome)."""
    fail_to_pass_failed: list[str] = []
    """FAIL_TO_PASS ids that did not pass (not run counts as not passed)."""
    pass_to_pass_failed: list[str] = []
    """PASS_TO_PASS ids that broke."""
    replay: float = 1.0
    """Fraction of the recorded calls (the feature's and the PASS_TO_PASS tests') answered as recorded (1.0 when none
    were recorded)."""
    replay_calls: int = 0
    """How many recorded calls were replayed."""
    regression_calls: int = 0
    """Of `replay_calls`, how many were PASS_TO_PASS calls into the source files (`mining.regression`)."""
    replay_mismatches: list[str] = []
    """The first calls answered otherwise: index, target, why."""
    replay_note: str | None = None
    """Why nothing was replayed where a task may carry recorded behaviour (swe-gym: the instance has no usable
    oracle, and why)."""
    network_isolated: bool = False
    """The run had a network namespace of its own (loopback only)."""
    isolation: str = "reaper"
    """How the rollout's processes were ended: `pid-namespace` (killed whole), `container` (the docker/podman box's
    own PID namespace: all but its PID 1 killed) or `reaper` (by their tags only)."""
    isolation_note: str | None = None
    """Why no PID namespace was used (unshare refused or missing, turned off), when none was."""
    private_copy: bool = False
    """The tree was graded as a copy in a fresh folder the agent never saw."""
    grader_box: bool = False
    """The copy was graded in a grader box: a second container from the image, whose interpreter the agent never
    reached."""
    jailed: bool = False
    """The suite ran in the jail (`composer_prime.process.jail`, subprocess runtime): the host read-only, the task's expected
    side covered, no capability."""
    expected_hidden: bool = True
    """The agent could not read the task's expected side (checked at setup; a container box never holds it)."""
    timed_out: bool = False
    """The run hit its time limit and was killed."""
    void: list[str] = []
    """Why the grade is not trusted: a canary came back wrong, the scan found test machinery."""
    removed: list[str] = []
    """Files the agent added that were removed before the run."""
    exit_code: int | None = None
    """pytest's exit status as the recorder saw it (None when it never finished)."""
    seconds: float = 0.0
    """Wall-clock time of the whole grading."""
    error: str | None = None
    """Why the tests could not be judged (the run never reported, the test patch did not apply)."""
    output_tail: str = ""
    """The last lines of the run's output, for inspection."""
    patch: str = ""
    """The agent's diff against the starting tree, computed on the host (`diff.tree_diff`); the tasksets put it on
    `trace.info["patch"]`, not in `info()`."""

    @property
    def solved(self) -> bool:
        return (
            self.error is None
            and not self.void
            and not self.timed_out
            and self.fail_to_pass == 1.0
            and self.pass_to_pass == 1.0
            and self.replay == 1.0
        )

    def info(self) -> dict:
        """The grade as recorded on `trace.info["grading"]` (with `solved` and the metrics)."""
        return {**self.model_dump(exclude={"patch"}), "solved": self.solved, "metrics": self.metrics()}

    def metrics(self) -> dict[str, float]:
        return {
            "fail_to_pass": self.fail_to_pass,
            "pass_to_pass": self.pass_to_pass,
            "replay": self.replay,
            "replay_used": float(self.replay_calls > self.regression_calls),
            "expected_side_hidden": float(self.expected_hidden),
            "network_isolated": float(self.network_isolated),
            "process_isolated": float(self.isolation in ("pid-namespace", "container") and self.private_copy),
            "timed_out": float(self.timed_out),
            "void": float(bool(self.void)),
        }


def fraction(outcomes: Mapping[str, str], tests: Iterable[str], baseline: Mapping[str, str]) -> tuple[float, list[str]]:
    """The fraction of `tests` that passed (1.0 for none) and the ids that did not: PASSED, or the outcome `baseline`
    records for that test (XFAIL, SKIPPED); anything else, not run included, is not a pass."""
    tests = list(tests)
    failed = [test for test in tests if outcomes.get(test) not in ("PASSED", baseline.get(test, "PASSED"))]
    return ((len(tests) - len(failed)) / len(tests) if tests else 1.0), failed
