"""Per-test outcomes from pytest output, shared by every grader (feature-deletion miner and environment, swe-gym).

Two sources of lines, both optional:
- the `-rA` short summary at the end: `PASSED tests/test_a.py::test_x`, `FAILED tests/test_a.py::test_y - msg`,
  `ERROR tests/test_b.py - ImportError` (a collection error names a file), `SKIPPED [1] tests/x.py:3: reason`
  (a location, not a test id, so ignored);
- the verbose (`-v`) progress lines: `tests/test_a.py::test_x PASSED [ 50%]`, `... SKIPPED (reason) [ 60%]`, the
  only place where a skipped test's id appears.

A third source is the grader's own recorder (`composer_prime.grading.bootstrap`): one JSON record per kind of pytest
report (`id`, `when`, `outcome`, `xfail`; `grading.stream.read_stream` flattens the recorder's per-test lines into them),
folded by `outcomes_from_records` into the same outcome names.

A test reported more than once (a passing test whose teardown errors) keeps its worst outcome. A test whose id
does not appear did not run (its module failed to import, say) and counts as not passing. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PASSING = frozenset({"PASSED", "XFAIL"})
"""Outcomes that count as a pass. XFAIL is an expected failure the suite itself accepts."""

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$")
_VERBOSE = re.compile(r"^(\S.*?::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?(?: +\[ *\d+%\])?$")


def _summary_id(outcome: str, rest: str) -> str | None:
    """The node id of a summary line, or None for the id-less `SKIPPED [N] file:line: reason` form.

    A failure line appends ` - message`; parametrize ids may contain ` - ` too, inside brackets, so the id is the
    shortest prefix before a ` - ` whose brackets balance.
    """
    if rest.startswith("["):
        return None
    if outcome in ("FAILED", "ERROR", "XFAIL", "XPASS") and " - " in rest:
        parts = rest.split(" - ")
        for index in range(1, len(parts)):
            candidate = " - ".join(parts[:index])
            if candidate.count("[") == candidate.count("]"):
                return candidate.rstrip()
    return rest.rstrip()


def parse_outcomes(output: str) -> dict[str, str]:
    """Map each test id in pytest output (`-rA`, optionally with `-v`) to its outcome (`PASSED`, `FAILED`, ...)."""
    outcomes: dict[str, str] = {}
    for raw in _ANSI.sub("", output).splitlines():
        line = raw.strip()
        summary = _SUMMARY.match(line)
        if summary is not None:
            outcome, test_id = summary.group(1), _summary_id(summary.group(1), summary.group(2))
        else:
            verbose = _VERBOSE.match(line)
            if verbose is None:
                continue
            test_id, outcome = verbose.group(1), verbose.group(2)
        if test_id:
            _keep_worst(outcomes, test_id, outcome)
    return outcomes


def _keep_worst(outcomes: dict[str, str], test_id: str, outcome: str) -> None:
    previous = outcomes.get(test_id)
    if previous is None or (previous in PASSING and outcome not in PASSING):
        outcomes[test_id] = outcome


def _record_outcome(when: str, outcome: str, xfail: bool) -> str | None:
    """The outcome name of one pytest report (None for a passing setup or teardown, which says nothing)."""
    if outcome == "failed":
        return "FAILED" if when == "call" else "ERROR"
    if outcome == "skipped":
        return "XFAIL" if xfail else "SKIPPED"
    if when == "call":
        return "XPASS" if xfail else "PASSED"
    return None


def outcomes_from_records(records: Iterable[dict]) -> dict[str, str]:
    """Outcomes from the grader recorder's report records; a failed collection marks its file (or class) ERROR."""
    outcomes: dict[str, str] = {}
    for record in records:
        test_id = record.get("id")
        if not isinstance(test_id, str) or not test_id:
            continue
        outcome = _record_outcome(str(record.get("when")), str(record.get("outcome")), bool(record.get("xfail")))
        if outcome is not None:
            _keep_worst(outcomes, test_id, outcome)
    return outcomes


def passing(outcomes: dict[str, str]) -> set[str]:
    """The ids whose outcome counts as a pass."""
    return {test_id for test_id, outcome in outcomes.items() if outcome in PASSING}


def pass_fraction(outcomes: dict[str, str], tests: Iterable[str], ok: frozenset[str] = PASSING) -> float:
    """The fraction of `tests` whose outcome is in `ok` (1.0 for an empty list: nothing was broken)."""
    tests = list(tests)
    if not tests:
        return 1.0
    return sum(outcomes.get(test) in ok for test in tests) / len(tests)
