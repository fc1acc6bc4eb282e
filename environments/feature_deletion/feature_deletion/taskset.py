"""feature-deletion: a tested feature was deleted from a real repository; the agent rebuilds it.

Tasks come from `composer-prime mine-features` (rows of `composer_prime.mining.record.MinedTask`). `setup` unpacks
the scrubbed snapshot (a fresh single-commit git repository, no bytecode or caches, the feature's test files held
out) into the rollout's work directory. At scoring, `grade` puts back every test file, `conftest.py` and pytest
configuration from the task (agent edits undone, agent-added ones removed, `__pycache__` cleared), writes the
held-out tests in for the first time, and runs the suite once with a timeout, without network where `unshare -n`
works in the box. Reward 1.0 when every FAIL_TO_PASS test passes and no PASS_TO_PASS test breaks, else 0.0; the two
pass fractions are metrics. `validate` applies the gold patch and expects 1.0 (verifiers 0.4.0 also scores the
untouched repository and expects less).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import verifiers.v1 as vf
from pydantic import Field

from composer_prime.mining.record import MinedTask, load_rows
from composer_prime.mining.testrun import PYTEST_ARGS
from composer_prime.pytest_outcomes import parse_outcomes, pass_fraction, passing
from composer_prime.teachers.judge import TeacherTaskConfig

logger = logging.getLogger(__name__)

SYSTEM = (
    "You are a software engineer working in a Python repository (your current directory). Part of the code base "
    "was removed; rebuild it as described, in the files where it belongs. Read the surrounding code and its call "
    "sites first, run the visible tests, and finish once the feature works. Test files are restored before grading."
)
SNAPSHOT_FILE = ".feature-deletion-snapshot.tar.gz"
GOLD_FILE = ".feature-deletion-gold.patch"
ROOT_CONFIGS = ("pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml")
PATCH_CAP_BYTES = 200_000

# Files that change what pytest runs: any the task does not own are removed before grading.
_LIST_INFLUENCERS = (
    "find . -path ./.git -prune -o \\( -name conftest.py -o -name sitecustomize.py -o -name usercustomize.py "
    "-o -name __pycache__ \\) -print0; for f in "
    + " ".join(ROOT_CONFIGS)
    + '; do [ -e "$f" ] && printf "./%s\\0" "$f"; done; true'
)
# Runs the test command: network namespace when allowed, `timeout` when present, the work tree first on sys.path.
_RUN_SUITE = (
    'net=""; if [ "$FD_ISOLATE" = 1 ] && unshare -n true 2>/dev/null; then net="unshare -n"; fi; '
    'echo "feature-deletion-network=${net:+isolated}"; '
    'export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=".:src${PYTHONPATH:+:$PYTHONPATH}"; '
    'if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 "$FD_LIMIT" $net "$@"; fi; exec $net "$@"'
)


class FeatureDeletionData(vf.TaskData):
    mined: MinedTask
    """The mined row: snapshot, test files, FAIL_TO_PASS / PASS_TO_PASS ids, gold patch, test command."""

    @property
    def patch(self) -> str:
        """The gold patch, under the name swe-gym's task data uses (PRIME-RL's `opsd` reads it as `demo_key`)."""
        return self.mined.gold_patch


class FeatureDeletionTaskConfig(TeacherTaskConfig):
    test_cmd: list[str] | None = None
    """Pytest launcher in the box, replacing the task's own (e.g. `["python3", "-m", "pytest"]` in an image)."""
    test_timeout_s: float | None = Field(None, gt=0)
    """Limit for the grading run of the suite, in seconds; None keeps the task's own."""
    isolate_network: bool = True
    """Grade under `unshare -n` (no network) where the box allows it; the metric `network_isolated` says if it did."""


class FeatureDeletionConfig(vf.TasksetConfig):
    tasks: Path | None = None
    """Tasks file written by `composer-prime mine-features` (JSON lines)."""
    task: FeatureDeletionTaskConfig = FeatureDeletionTaskConfig()


@dataclass
class Grade:
    outcomes: dict[str, str] = field(default_factory=dict)
    fail_to_pass: float = 0.0
    pass_to_pass: float = 0.0
    network_isolated: bool = False
    seconds: float = 0.0
    error: str | None = None
    output_tail: str = ""

    @property
    def solved(self) -> bool:
        return self.error is None and self.fail_to_pass == 1.0 and self.pass_to_pass == 1.0


async def _run(runtime: vf.Runtime, argv: list[str], what: str, env: dict[str, str] | None = None) -> vf.ProgramResult:
    result = await runtime.run(argv, env or {})
    if result.exit_code != 0:
        raise RuntimeError(f"feature-deletion: {what} failed (exit {result.exit_code}): {result.stderr.strip()[-500:]}")
    return result


class FeatureDeletionTask(vf.Task[FeatureDeletionData, vf.State, FeatureDeletionTaskConfig]):
    @property
    def test_cmd(self) -> list[str]:
        return self.config.test_cmd or self.data.mined.test_cmd

    @property
    def test_timeout_s(self) -> float:
        return self.config.test_timeout_s or self.data.mined.test_timeout_s

    async def setup(self, runtime: vf.Runtime) -> None:
        await runtime.write(SNAPSHOT_FILE, base64.b64decode(self.data.mined.snapshot))
        await _run(runtime, ["tar", "-xzf", SNAPSHOT_FILE], "unpacking the snapshot")
        await _run(runtime, ["rm", "-f", SNAPSHOT_FILE], "removing the snapshot archive")

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Keep the agent's diff against the snapshot in `trace.info["patch"]` (capped), for inspection."""
        result = await runtime.run(["sh", "-c", "git add -A >/dev/null 2>&1 && git diff --cached HEAD"], {})
        if result.exit_code == 0:
            trace.info["patch"] = result.stdout[:PATCH_CAP_BYTES]

    async def grade(self, runtime: vf.Runtime) -> Grade:
        """Restore the task's test files, add the held-out ones, run the suite once and compare against the task."""
        mined = self.data.mined
        started = time.monotonic()
        listing = await _run(runtime, ["sh", "-c", _LIST_INFLUENCERS], "listing test configuration")
        stray = [p for p in listing.stdout.split("\0") if p and p.removeprefix("./") not in mined.test_files]
        if stray:
            await _run(runtime, ["rm", "-rf", "--", *stray], "removing files the task does not own")
        for path, text in mined.test_files.items():
            await runtime.write(path, text.encode("utf-8"))
        limit = self.test_timeout_s
        env = {"FD_ISOLATE": "1" if self.config.isolate_network else "0", "FD_LIMIT": f"{limit:g}"}
        argv = ["sh", "-c", _RUN_SUITE, "feature-deletion-grade", *self.test_cmd, *PYTEST_ARGS]
        grade = Grade()
        try:
            result = await asyncio.wait_for(runtime.run(argv, env), limit + 30)
        except TimeoutError:
            grade.error = f"the test run did not return within {limit + 30:g}s"
        else:
            output = result.stdout + "\n" + result.stderr
            grade.outcomes = parse_outcomes(output)
            grade.network_isolated = "feature-deletion-network=isolated" in result.stdout
            grade.output_tail = output[-4000:]
            if result.exit_code in (124, 137):
                grade.error = f"the test run was killed after {limit:g}s (test_timeout_s)"
        grade.fail_to_pass = pass_fraction(grade.outcomes, mined.fail_to_pass)
        grade.pass_to_pass = pass_fraction(grade.outcomes, mined.pass_to_pass)
        grade.seconds = time.monotonic() - started
        return grade

    @vf.metric
    async def tests(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        grade = await self.grade(runtime)
        passed = passing(grade.outcomes)
        trace.info["feature_deletion"] = {
            "broken": [t for t in self.data.mined.fail_to_pass + self.data.mined.pass_to_pass if t not in passed][:50],
            "error": grade.error,
            "seconds": round(grade.seconds, 3),
            "output_tail": grade.output_tail,
        }
        return {
            "fail_to_pass": grade.fail_to_pass,
            "pass_to_pass": grade.pass_to_pass,
            "network_isolated": float(grade.network_isolated),
        }

    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        info = trace.info.get("feature_deletion") or {}
        ok = info.get("error") is None and "fail_to_pass" in trace.metrics
        return float(ok and trace.metrics["fail_to_pass"] == 1.0 and trace.metrics.get("pass_to_pass") == 1.0)

    async def validate(self, runtime: vf.Runtime) -> bool:
        """The gold patch must solve the task (0.4.0's validate also checks that the untouched repo does not)."""
        await runtime.write(GOLD_FILE, self.data.mined.gold_patch.encode("utf-8"))
        await _run(runtime, ["git", "apply", GOLD_FILE], "applying the gold patch")
        await _run(runtime, ["rm", "-f", GOLD_FILE], "removing the gold patch")
        grade = await self.grade(runtime)
        if not grade.solved:
            logger.warning("feature-deletion: gold patch of %s does not solve it: %s", self.data.name, grade.error)
        return grade.solved


class FeatureDeletionTaskset(vf.Taskset[FeatureDeletionTask, FeatureDeletionConfig]):
    load_errors: list[str] = []
    """Set by `load`: one message per bad row of the tasks file (row number, field, value); those rows are skipped."""

    def load(self) -> list[FeatureDeletionTask]:
        path = self.config.tasks
        if path is None:
            raise ValueError(
                "feature-deletion: no tasks file; set `tasks` (--env.taskset.tasks PATH) to a file written by "
                "`composer-prime mine-features --repo REPO --out PATH`"
            )
        if not path.is_file():
            raise FileNotFoundError(
                f"feature-deletion: tasks = {str(path)!r}: no such file; mine one with mine-features"
            )
        rows, self.load_errors = load_rows(path)
        for error in self.load_errors:
            logger.warning("feature-deletion: %s: %s; the row is skipped", path, error)
        if not rows:
            raise ValueError(f"feature-deletion: no valid task in {path}: " + "; ".join(self.load_errors[:3]))
        tasks = []
        for idx, row in enumerate(rows):
            limit = self.config.task.test_timeout_s or row.test_timeout_s
            data = FeatureDeletionData(
                idx=idx,
                name=row.task_id,
                prompt=row.prompt,
                system_prompt=SYSTEM,
                mined=row,
                timeout=vf.TaskTimeout(scoring=2 * limit + 120),
            )
            tasks.append(FeatureDeletionTask(data, self.config.task))
        return tasks
