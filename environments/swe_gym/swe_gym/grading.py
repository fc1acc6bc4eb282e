"""Grading with SWE-bench semantics, as pure functions (the box-side commands are built here, run elsewhere).

After the agent finishes, in its own box:

1. every file the `test_patch` touches is reset to the box's base commit (a file the base lacks is removed), so
   edits the agent made to those tests do not count;
2. the `test_patch` is applied;
3. the test files it touches (and the files named by the FAIL_TO_PASS / PASS_TO_PASS ids; or exactly those ids,
   for repos configured so) run under pytest with `-rA -v`, inside `timeout`;
4. each listed test id is looked up in the output. The instance is resolved (reward 1.0) iff every FAIL_TO_PASS
   test passed and every PASS_TO_PASS test still passes. A FAIL_TO_PASS test that was skipped, errored, did not
   run or was not found counts as a failure; a skipped PASS_TO_PASS test counts as maintained (SWE-bench's
   `get_resolution_status`; https://github.com/SWE-bench/SWE-bench, `harness/grading.py`).

The pass fractions of both lists are reported as metrics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from composer_prime.pytest_outcomes import parse_outcomes

F2P_OK = frozenset({"PASSED", "XFAIL"})
P2P_OK = frozenset({"PASSED", "XFAIL", "SKIPPED"})

START = ">>>>> swe-gym: start test output"
END = ">>>>> swe-gym: end test output"
APPLY_FAILED = ">>>>> swe-gym: test_patch does not apply"
RESET_FAILED = ">>>>> swe-gym: could not reset test files to the base commit"

ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
DIFF_HEADER_RE = re.compile(r"^diff --git a/(.+?) b/(.+)$")
END_RE = re.compile(re.escape(END) + r" \(exit (-?\d+)\)")


def diff_paths(diff: str) -> list[str]:
    """Every path a unified git diff touches (both sides of a rename), in order of appearance."""
    paths: list[str] = []
    for line in diff.splitlines():
        match = DIFF_HEADER_RE.match(line)
        if match is None:
            continue
        for path in match.groups():
            if path not in paths:
                paths.append(path)
    return paths


def created_or_kept_paths(diff: str) -> list[str]:
    """The paths that exist after a diff is applied (its `b/` side, minus deleted files)."""
    paths: list[str] = []
    current: str | None = None
    for line in diff.splitlines():
        match = DIFF_HEADER_RE.match(line)
        if match is not None:
            current = match.group(2)
            if current not in paths:
                paths.append(current)
        elif line.startswith("deleted file mode") and current in paths:
            paths.remove(current)
    return paths


def file_of_test(test_id: str) -> str:
    """The file part of a pytest node id (`tests/test_a.py::T::test_x[1]` -> `tests/test_a.py`)."""
    return test_id.split("::", 1)[0]


def directives_for(
    test_patch: str, fail_to_pass: Iterable[str], pass_to_pass: Iterable[str], by_id: bool = False
) -> list[str]:
    """What the test command runs: the Python test files the test patch leaves in place, then any other file a listed
    id names; or, `by_id`, exactly the listed ids (for data-driven suites whose ids all name one huge file)."""
    if by_id:
        return list(dict.fromkeys((*fail_to_pass, *pass_to_pass)))
    files = [path for path in created_or_kept_paths(test_patch) if path.endswith(".py")]
    for test_id in (*fail_to_pass, *pass_to_pass):
        path = file_of_test(test_id)
        if path.endswith(".py") and path not in files:
            files.append(path)
    return files


# Arguments: base, patch file, timeout seconds, the test-patch paths, "--", then the test command argv.
# The script itself never fails on test results; it reports them between markers and exits 0, so a non-zero
# exit means the box could not run it at all.
GRADE_SCRIPT = f"""
set -u
base="$1"; patch_file="$2"; timeout_s="$3"; shift 3
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  if git cat-file -e "$base:$1" 2>/dev/null; then
    git -c core.hooksPath=/dev/null checkout -q "$base" -- "$1" || {{ echo "{RESET_FAILED}: $1"; exit 0; }}
  else
    rm -rf -- "$1"
  fi
  shift
done
shift
git apply --whitespace=nowarn "$patch_file" 2>&1 || {{ echo "{APPLY_FAILED}"; exit 0; }}
echo "{START}"
timeout -k 10 "$timeout_s" "$@" 2>&1
rc=$?
echo "{END} (exit $rc)"
exit 0
"""


def grade_argv(
    base: str,
    patch_file: str,
    test_patch: str,
    test_cmd: Sequence[str],
    directives: Sequence[str],
    timeout_s: float,
) -> list[str]:
    """The argv that resets the test files, applies the test patch and runs the tests in the box's work dir."""
    return [
        "bash",
        "-c",
        GRADE_SCRIPT,
        "swe-gym-grade",
        base,
        patch_file,
        str(int(timeout_s)),
        *diff_paths(test_patch),
        "--",
        *test_cmd,
        *directives,
    ]


@dataclass
class TestReport:
    """What grading found; `error` is set when the tests could not run (the instance is then unresolved)."""

    resolved: bool
    f2p_pass_fraction: float
    p2p_pass_fraction: float
    f2p_failed: list[str] = field(default_factory=list)
    p2p_failed: list[str] = field(default_factory=list)
    tests_exit_code: int | None = None
    error: str | None = None

    def to_info(self) -> dict[str, Any]:
        return asdict(self)


def _fraction(passed: int, total: int) -> float:
    return passed / total if total else 1.0


def report(output: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> TestReport:
    """Grade the output of `GRADE_SCRIPT` against the instance's FAIL_TO_PASS / PASS_TO_PASS lists."""
    text = ANSI_RE.sub("", output)
    if APPLY_FAILED in text or RESET_FAILED in text or START not in text:
        reason = next((line for line in text.splitlines() if line.startswith(">>>>> swe-gym:")), None)
        error = reason or "the grading script printed no test output"
        return TestReport(False, 0.0, 0.0, list(fail_to_pass), list(pass_to_pass), error=error)
    body = text.split(START, 1)[1]
    end = END_RE.search(body)
    exit_code = int(end.group(1)) if end is not None else None
    outcomes = parse_outcomes(body[: end.start()] if end is not None else body)
    f2p_failed = [t for t in fail_to_pass if outcomes.get(t) not in F2P_OK]
    p2p_failed = [t for t in pass_to_pass if outcomes.get(t) not in P2P_OK]
    # `timeout` exits 124 (or 137 after its -k kill); SWE-bench grades a timed-out run as unresolved.
    error = f"the tests timed out (exit {exit_code})" if exit_code in (124, 137) else None
    return TestReport(
        resolved=not f2p_failed and not p2p_failed and error is None,
        f2p_pass_fraction=_fraction(len(fail_to_pass) - len(f2p_failed), len(fail_to_pass)),
        p2p_pass_fraction=_fraction(len(pass_to_pass) - len(p2p_failed), len(pass_to_pass)),
        f2p_failed=f2p_failed,
        p2p_failed=p2p_failed,
        tests_exit_code=exit_code,
        error=error,
    )
