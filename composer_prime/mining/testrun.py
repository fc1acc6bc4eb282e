"""Run a repository's pytest suite in a folder the way grading runs it, with a timeout, and read per-test outcomes.

Mining and grading share one launcher (`composer_prime.grading`): `python -I -S -B` with the grader's bootstrap, the
trusted ini built from the repository's own settings (pinned with `-c`, `--rootdir` the folder), the folder (and its
`src/`) on the path through that ini, plugin autoload off, outcomes from the recorder plugin, and, by default, a
network namespace of its own with loopback up. So a task is kept only if its tests pass the way they will be graded.
The folder is driven through verifiers' subprocess runtime, exactly as a box is.

The test command must be `<python> -m pytest`; `python` as its first word resolves to the interpreter running
composer-prime (its folder is put first on `PATH`).

`RUNTIME` opens the runtime each run goes through: the host's subprocess runtime, or, set by
`composer_prime.mining.box` for `mine-corpus`, an exec into a container from the package's image whose mount shows
the work folder at the same path, so the same launcher runs there with the image's Python and test dependencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf
from verifiers.v1.runtimes.subprocess import SubprocessRuntime

import composer_prime.grading
from composer_prime.grading.behaviour import VALUES_MODULE, RecordedCall, replay
from composer_prime.grading.grader import Suite, run_suite
from composer_prime.grading.pytest_config import CONFIG_NAMES, repo_settings

GRADING = Path(composer_prime.grading.__file__).parent


class TestCommandTimeout(Exception):
    """The test command ran past its time limit and was killed (with its whole process group)."""

    __test__ = False  # not a pytest test class


class TestCommandFailed(Exception):
    """The test command could not be started (not found, not executable, not a pytest launcher)."""

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
    behaviour: dict | None = None
    """`{"calls": [...], "skipped": n}` from the behaviour recorder; only for recording runs whose plugin reported."""


def python_of(test_cmd: list[str]) -> str:
    """The interpreter of a `<python> -m pytest` command."""
    if len(test_cmd) != 3 or test_cmd[1:] != ["-m", "pytest"]:
        raise TestCommandFailed(
            f"test command {' '.join(test_cmd)!r} is not `<python> -m pytest`; mining and grading run pytest through "
            "their own launcher, so pass the interpreter that has the project's test dependencies (--test-cmd "
            "'/path/to/python -m pytest')"
        )
    return test_cmd[0]


def settings_of(cwd: Path) -> dict[str, str]:
    """The repository's pytest settings, from its root configuration files."""
    configs = {name: (cwd / name).read_text("utf-8", "replace") for name in CONFIG_NAMES if (cwd / name).is_file()}
    return repo_settings(configs)


@contextlib.asynccontextmanager
async def host_runtime(cwd: Path, env: dict[str, str]) -> AsyncIterator[vf.Runtime]:
    """The host's subprocess runtime in `cwd`, with `env`."""
    runtime = SubprocessRuntime(vf.SubprocessConfig(), name="composer-prime-mine")
    runtime.workdir = cwd
    runtime.env = env
    yield runtime


RUNTIME: Callable[[Path, dict[str, str]], AbstractAsyncContextManager[vf.Runtime]] = host_runtime
"""Opens the runtime of one run in a folder (`cwd`, `env`); `composer_prime.mining.box` replaces it."""


async def _run(suite: Suite, cwd: Path, env: dict[str, str]):
    async with RUNTIME(cwd, env) as runtime:
        return await run_suite(runtime, suite, str(cwd.resolve()))


def run_tests(
    test_cmd: list[str],
    cwd: Path,
    timeout_s: float,
    *,
    trace: bool = False,
    isolate_network: bool = True,
    targets: list[str] | None = None,
    record: dict | None = None,
    pythonpath: list[str] | None = None,
) -> TestRun:
    """Run the suite in `cwd` (or only `targets`, test files relative to it); raise `TestCommandTimeout` after
    `timeout_s` seconds, `TestCommandFailed` if it won't start. `record` (`path`, `qualname`, `kind` of a feature; or
    `kind` `package` and the `tests` to record) records the calls into that feature (`behaviour_plugin`).
    `pythonpath`: folders of `cwd` holding the code under test (default `.` and `src`)."""
    settings = settings_of(cwd)
    targets = targets or settings.get("testpaths", "").split() or ["."]
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    plugins = {}
    with tempfile.TemporaryDirectory(prefix="composer-prime-trace-") as scratch:
        trace_out = Path(scratch) / "calls.json"
        if trace:
            plugins["_composer_prime_trace"] = Path(__file__).with_name("trace_plugin.py").read_text("utf-8")
            env |= {"COMPOSER_PRIME_TRACE_ROOT": str(cwd.resolve()), "COMPOSER_PRIME_TRACE_OUT": str(trace_out)}
        behaviour_out = Path(scratch) / "behaviour.json"
        if record is not None:
            plugins[VALUES_MODULE] = (GRADING / "values.py").read_text("utf-8")
            plugins["_composer_prime_behaviour"] = Path(__file__).with_name("behaviour_plugin.py").read_text("utf-8")
            spec = {**record, "root": str(cwd.resolve()), "out": str(behaviour_out)}
            env["COMPOSER_PRIME_BEHAVIOUR"] = json.dumps(spec)
        suite = Suite(
            fail_to_pass=[],
            pass_to_pass=[],
            targets=targets,
            timeout_s=timeout_s,
            isolate_network=isolate_network,
            python=python_of(test_cmd),
            settings=settings,
            plugins=plugins,
            canaries=False,
            **({"pythonpath": pythonpath} if pythonpath is not None else {}),
        )
        grade, outcomes, _ = asyncio.run(_run(suite, cwd, env))
        if grade.timed_out:
            raise TestCommandTimeout(
                f"the test suite did not finish within {timeout_s:g}s in {cwd}; a test hangs or the suite is slower "
                "than the limit (raise --baseline-timeout-s for the baseline run, --test-timeout-s for the runs after it)"
            )
        if grade.exit_code is None:
            raise TestCommandFailed(f"pytest did not run in {cwd} with {test_cmd[0]}: {grade.output_tail[-1500:]}")
        calls = None
        if trace and trace_out.exists():
            raw = json.loads(trace_out.read_text(encoding="utf-8"))
            calls = {test: [tuple(call) for call in called] for test, called in raw.items()}
        recorded = None
        if record is not None and behaviour_out.exists():
            recorded = json.loads(behaviour_out.read_text(encoding="utf-8"))
    return TestRun(
        outcomes=outcomes,
        exit_code=grade.exit_code,
        seconds=grade.seconds,
        output=grade.output_tail,
        calls=calls,
        behaviour=recorded,
    )


def replay_calls(
    test_cmd: list[str], cwd: Path, calls: list[RecordedCall], timeout_s: float, pythonpath: list[str] | None = None
) -> list[dict | None]:
    """Replay `calls` against the code in `cwd` exactly as grading does; one answer per call (None: none came).
    `pythonpath`: folders of `cwd` holding the code under test (default `.` and `src`)."""
    paths = pythonpath if pythonpath is not None else [".", "src"]
    env = {"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}

    async def run() -> list[dict | None]:
        async with RUNTIME(cwd, env) as runtime:
            answers, _, _ = await replay(runtime, calls, str(cwd.resolve()), python_of(test_cmd), paths, timeout_s)
        return answers

    return asyncio.run(run())
