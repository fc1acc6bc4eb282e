"""`composer_prime.process.commands.run_checked_host`: stdout back, or the caller's error naming the command and the
fix."""

from __future__ import annotations

import sys

import pytest

from composer_prime.process.commands import run_checked_host


class PrepError(RuntimeError):
    pass


def test_stdout_of_a_command_that_succeeds(tmp_path):
    out = run_checked_host(
        [sys.executable, "-c", "import os; print(os.getcwd())"], error=PrepError, timeout_s=30, cwd=tmp_path
    )
    assert out.strip() == str(tmp_path)


def test_failure_timeout_and_missing_program_raise_the_callers_error(tmp_path):
    with pytest.raises(PrepError, match=r"exited 3 \(in .*\):\nboom") as err:
        run_checked_host(
            [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
            error=PrepError,
            timeout_s=30,
            cwd=tmp_path,
        )
    assert type(err.value) is PrepError
    with pytest.raises(PrepError, match="ran past 1s"):
        run_checked_host([sys.executable, "-c", "import time; time.sleep(10)"], error=PrepError, timeout_s=1)
    with pytest.raises(PrepError, match="`no-such-program-x` is not installed or not on PATH"):
        run_checked_host(["no-such-program-x", "--help"], error=PrepError, timeout_s=5)
