"""A `unittest` suite with `subTest` blocks through the grader's launcher: pytest 9 reports each block as a call of
its test, and the outcome stream takes them as subtests, not as a report made twice (more-itertools' gold patches
were voided before)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import verifiers.v1 as vf
from verifiers.v1.runtimes.subprocess import SubprocessRuntime

from composer_prime.grading.grader import Suite, run_suite

pytestmark = pytest.mark.slow

SUITE = """\
import unittest


class T(unittest.TestCase):
    def test_all_pass(self):
        for n in range(3):
            with self.subTest(n=n):
                self.assertEqual(n * 2, n + n)

    def test_one_fails(self):
        for n in range(3):
            with self.subTest(n=n):
                self.assertNotEqual(n, 1)
"""


def test_subtests_are_judged_without_voiding(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sub.py").write_text(SUITE)
    suite = Suite(fail_to_pass=[], pass_to_pass=[], targets=["tests/test_sub.py"], timeout_s=60, canaries=False)

    async def scenario():
        runtime = SubprocessRuntime(vf.SubprocessConfig(), name="grading-subtests")
        runtime.workdir = tmp_path
        return await run_suite(runtime, suite, str(tmp_path.resolve()))

    grade, outcomes, _ = asyncio.run(scenario())
    assert grade.void == [] and grade.error is None, grade.output_tail
    assert outcomes == {
        "tests/test_sub.py::T::test_all_pass": "PASSED",
        "tests/test_sub.py::T::test_one_fails": "FAILED",
    }
