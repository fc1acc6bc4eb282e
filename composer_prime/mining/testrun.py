"""Run a repository's pytest suite in a folder, with a timeout, and read per-test outcomes.

The test command is a pytest launcher (`python -m pytest`, `poetry run pytest`, `tox -e py --`); pytest also runs
unittest and nose-style suites, so this covers non-pytest setups. Arguments added to every run: `-rA` (the
per-test summary `outcomes` parses), `-p no:cacheprovider` (no `.pytest_cache`), `--continue-on-collection-errors`
(a test module that no longer imports fails its own tests, not the whole run). `PYTHONDONTWRITEBYTECODE=1` keeps
bytecode out of the tree; the folder (and its `src/`) come first on `PYTHONPATH` so that an editable install of the
original repository cannot shadow the edited copy. `python` as the first word of the command resolves to the
interpreter running composer-prime (its folder is put first on `PATH`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from composer_prime.pytest_outcomes import parse_outcomes

PYTEST_ARGS = ["-rA", "-p", "no:cacheprovider", "--continue-on-collection-errors", "--color=no"]
"""Arguments appended to the test command on every run (mining and grading)."""


class TestCommandTimeout(Exception):
    """The test command ran past its time limit and was killed (with its whole process group)."""

    __test__ = False  # not a pytest test class


class TestCommandFailed(Exception):
    """The test command could not be started (not found, not executable)."""

    __test__ = False


@dataclass(frozen=True)
class TestRun:
    __test__ = False

    outcomes: dict[str, str]
    exit_code: int
    seconds: float
    output: str
    calls: dict[str, list[tuple[str, str]]] | None = None
    """Per test id, the (path, qualname) functions it called; only for traced runs whose plugin reported."""


def _environment(cwd: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    roots = [str(cwd)] + ([str(cwd / "src")] if (cwd / "src").is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(roots + [p for p in [env.get("PYTHONPATH", "")] if p])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def run_tests(
    test_cmd: list[str],
    cwd: Path,
    timeout_s: float,
    *,
    trace: bool = False,
    extra_args: list[str] | None = None,
) -> TestRun:
    """Run the suite in `cwd`; raise `TestCommandTimeout` after `timeout_s` seconds, `TestCommandFailed` if it won't start."""
    env = _environment(cwd)
    argv = list(test_cmd) + PYTEST_ARGS + list(extra_args or [])
    with tempfile.TemporaryDirectory(prefix="composer-prime-trace-") as scratch:
        trace_out = Path(scratch) / "calls.json"
        if trace:
            shutil.copyfile(Path(__file__).with_name("trace_plugin.py"), Path(scratch) / "_composer_prime_trace.py")
            env["PYTHONPATH"] = os.pathsep.join([scratch, env["PYTHONPATH"]])
            env["COMPOSER_PRIME_TRACE_ROOT"] = str(cwd)
            env["COMPOSER_PRIME_TRACE_OUT"] = str(trace_out)
            argv += ["-p", "_composer_prime_trace"]
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as exc:
            raise TestCommandFailed(
                f"cannot start test command {' '.join(test_cmd)!r} in {cwd}: {exc}; pass a pytest launcher that "
                "exists on PATH with --test-cmd"
            ) from exc
        try:
            stdout, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the group we started: the launcher and everything it spawned
            process.communicate()
            raise TestCommandTimeout(
                f"test command {' '.join(argv[:4])} ... did not finish within {timeout_s:g}s in {cwd}; a test hangs "
                "or the suite is slower than the limit (raise --test-timeout)"
            ) from None
        seconds = time.monotonic() - started
        output = stdout.decode("utf-8", errors="replace")
        calls = None
        if trace and trace_out.exists():
            raw = json.loads(trace_out.read_text(encoding="utf-8"))
            calls = {test: [tuple(call) for call in called] for test, called in raw.items()}
    return TestRun(
        outcomes=parse_outcomes(output), exit_code=process.returncode, seconds=seconds, output=output, calls=calls
    )
