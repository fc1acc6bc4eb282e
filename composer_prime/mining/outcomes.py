"""Per-test outcomes from pytest's `-rA` short summary.

With `-rA`, pytest ends its output with one line per test: `PASSED tests/test_a.py::test_x`,
`FAILED tests/test_a.py::test_y - AssertionError: ...`, `ERROR tests/test_b.py` (a collection error names a
file, not a test). A test whose id does not appear did not run (its module failed to import, say) and counts
as not passing. Pure functions, shared by the miner and the environment's grader so both judge alike.
"""

from __future__ import annotations

import re

PASSING = frozenset({"PASSED", "XFAIL"})
"""Outcomes that count as a pass. XFAIL is an expected failure the suite itself accepts."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S.*?)(?:\s+-\s+.*)?$")


def parse_outcomes(output: str) -> dict[str, str]:
    """Map each test id in a pytest `-rA` summary to its outcome (`PASSED`, `FAILED`, ...).

    A test reported twice (a failing test whose teardown also errors) keeps its worst outcome.
    """
    outcomes: dict[str, str] = {}
    for raw in output.splitlines():
        match = _LINE.match(_ANSI.sub("", raw).rstrip())
        if match is None:
            continue
        outcome, test_id = match.group(1), match.group(2).strip()
        if outcome == "SKIPPED" and test_id.startswith("["):
            continue  # `SKIPPED [1] tests/x.py:3: reason` names a location, not a test id
        previous = outcomes.get(test_id)
        if previous is None or (previous in PASSING and outcome not in PASSING):
            outcomes[test_id] = outcome
    return outcomes


def passing(outcomes: dict[str, str]) -> set[str]:
    """The ids whose outcome counts as a pass."""
    return {test_id for test_id, outcome in outcomes.items() if outcome in PASSING}


def pass_fraction(outcomes: dict[str, str], tests: list[str]) -> float:
    """The fraction of `tests` that passed (1.0 for an empty list: nothing was broken)."""
    if not tests:
        return 1.0
    passed = passing(outcomes)
    return sum(test in passed for test in tests) / len(tests)
