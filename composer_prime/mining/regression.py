"""The PASS_TO_PASS tests' calls into the source files, recorded from the gold tree and replayed at grading.

The replay of the deleted feature (or of the gold patch's FAIL_TO_PASS calls) says nothing about the rest of the
package: a fix that implements the feature honestly, breaks a function another test file exercises, and hides that
regression from pytest with an in-process report forger that tells canaries from originals by their source (it
compares each running test's syntax tree with the same-named test on disk) scored 1.0. Any check that runs inside a
pytest process where the candidate's code is imported can be forged that way, so the defence is out of process: the
calls the PASS_TO_PASS tests make straight from a test file into a non-test file (`behaviour_plugin`'s `package`
mode), recorded on the gold tree, replayed against the candidate by the same replayer and judged on the host by the
same comparison (`grading.behaviour.mismatch`, with every relaxation of the feature's replay), beside the feature's
calls. A forger then has to make the code answer correctly outside the test process, which is the fix.

Kept, in this order (the same steps as the feature's recording, one mechanism):

1. at most `PER_TEST` calls of one test, `PER_TARGET` into one function, `MAX_CALLS` in all, each at most
   `MAX_BYTES` characters of JSON (the recorder's caps: a few calls of many tests, bounded whatever the suite);
2. calls whose values have no strict form are dropped (counted), and so are calls whose values name a test module or
   pytest (the replay runs before the test files are in the box) and calls handed an instance with private
   attributes (rebuilding it hands the candidate the gold's private layout, which a fix that touches that class
   need not share); an iterator a call returns is drained by a lone replay of the gold;
3. the rest are replayed twice on the gold tree, as grading replays them: only calls answered as recorded both times
   stay (the others depend on state the tests set up, on time or on chance);
4. `unaffected`: only calls the task's starting tree answers as the gold does are kept. A call the task changes is
   the feature's (or the fix's) to judge, and the starting tree's answer passed its test too, so an honest fix may
   answer it a third way; a call the task leaves alone must answer as it always did, which is what a regression in
   another file breaks.

What is not recorded (values without a strict form, calls made inside the package, state the tests set up) stays
guarded by the suite and the canaries alone.
"""

from __future__ import annotations

from pathlib import Path

from composer_prime.grading.behaviour import RecordedCall, mismatch
from composer_prime.mining.behaviour import (
    record_calls,
    replayed_as_recorded,
    with_drained_results,
    without_test_code,
)
from composer_prime.mining.testrun import replay_calls

PER_TEST = 3
"""Calls kept of one test (the first ones it makes, deduplicated across the suite)."""
PER_TARGET = 6
"""Calls kept into one function."""
MAX_CALLS = 160
"""Calls kept in all, per recording."""
MAX_BYTES = 2000
"""Characters of JSON one recorded call may take (arguments, answer, arguments after); a larger one is skipped."""


def caps(tests: list[str]) -> dict:
    """The recorder's spec (`behaviour_plugin`, `package` mode) for the calls `tests` make, within the caps."""
    return {
        "kind": "package",
        "tests": sorted(tests),
        "max_calls": MAX_CALLS,
        "per_test": PER_TEST,
        "per_target": PER_TARGET,
        "max_bytes": MAX_BYTES,
    }


def private_state(tree: object) -> bool:
    """Whether a tagged tree (or a list of them) holds an instance with a private attribute."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, list) or not node:
            continue
        if node[0] == "obj" and len(node) > 2 and node[2][:1] == ["dict"]:
            if any(pair[0][:1] == ["str"] and str(pair[0][1]).startswith("_") for pair in node[2][1]):
                return True
        stack.extend(item for item in node[isinstance(node[0], str) :] if isinstance(item, list))
    return False


def record_suite_calls(
    test_cmd: list[str],
    gold: Path,
    tests: list[str],
    timeout_s: float,
    targets: list[str] | None = None,
    pythonpath: list[str] | None = None,
) -> tuple[list[RecordedCall], int]:
    """Steps 1 to 3 on the gold tree `gold`: (the calls `tests` make into its source files that replay as recorded
    twice, how many were seen but not kept). `targets`: the test files to run (default: the suite's). Raises the
    test run's `TestCommandTimeout` / `TestCommandFailed`."""
    if not tests:
        return [], 0
    recorded, skipped, _ = record_calls(test_cmd, gold, caps(tests), targets or [], timeout_s, pythonpath)
    calls = without_test_code(recorded)
    calls = [c for c in calls if not private_state([c.args, list(c.kwargs.values())])]
    calls = with_drained_results(test_cmd, gold, calls, timeout_s, pythonpath)
    stable = replayed_as_recorded(test_cmd, gold, calls, timeout_s, pythonpath)
    stable = replayed_as_recorded(test_cmd, gold, stable, timeout_s, pythonpath)
    return stable, skipped + len(recorded) - len(stable)


def unaffected(
    test_cmd: list[str],
    starting: Path,
    calls: list[RecordedCall],
    timeout_s: float,
    pythonpath: list[str] | None = None,
) -> list[RecordedCall]:
    """Step 4: the calls the starting tree in `starting` answers as the gold did (a lone replay, as grading's)."""
    if not calls:
        return []
    answers = replay_calls(test_cmd, starting, calls, timeout_s, pythonpath)
    return [call for call, answer in zip(calls, answers, strict=True) if mismatch(call, answer) is None]
