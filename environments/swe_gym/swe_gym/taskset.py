"""swe-gym: SWE-Gym instances as verifiers v1 tasks, graded with SWE-bench semantics.

The agent gets the issue text and a box whose work directory holds the repository at `base_commit` (see
`box.py` for why the box's git history is a single commit). When it finishes, its diff against that commit is
captured on `trace.info["patch"]`; then the box's test files are reset, the instance's `test_patch` applied and
its FAIL_TO_PASS / PASS_TO_PASS tests run (`grading.py`). Reward `resolved` is 1.0 iff all of them pass.

Runtimes: `mode = "image"` gives every task SWE-Gym's per-instance container image (docker, prime); `mode =
"local"` runs on the subprocess runtime with a snapshot and a venv prepared once on the host (`local.py`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from composer_prime.teachers.judge import TeacherTaskConfig
from swe_gym import box, grading, sources
from swe_gym.local import LocalConfig, box_env, env_path, prepare_env, prepare_snapshot, venv_vars
from swe_gym.rows import SWEGymRow, parse_rows, select_rows

logger = logging.getLogger(__name__)

PROMPT = """<uploaded_files>
{repo}
</uploaded_files>
The Python repository {repo} is checked out in your working directory. Consider the following issue:

<issue_description>
{problem_statement}
</issue_description>

Make the changes to the repository's non-test files that resolve the issue. Tests that check the fix already \
exist and will be run after you finish, so you do not need to write or modify tests."""

DEFAULT_TEST_CMD = ["python", "-m", "pytest", "-rA", "-v", "-p", "no:cacheprovider", "--color=no"]
# SWE-bench-style images keep the project's environment in the `testbed` conda env.
IMAGE_PATH = (
    "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)


class SWEGymData(vf.TaskData):
    """One instance on the wire (the agent sees only `prompt`)."""

    instance_id: str
    """SWE-Gym's id, the task key."""
    repo: str
    """`owner/name`."""
    base_commit: str
    """The commit whose tree the box holds."""
    version: str
    """Release line; local-mode environments are keyed by repo and version."""
    patch: str
    """The gold fix; used only by `validate`."""
    test_patch: str
    """The fix's tests, applied at grading time."""
    fail_to_pass: list[str]
    """Test ids the fix makes pass."""
    pass_to_pass: list[str]
    """Test ids that must keep passing."""
    mode: Literal["image", "local"]
    """How the box is made (the taskset's `mode`)."""


class SWEGymTaskConfig(TeacherTaskConfig):
    local: LocalConfig = LocalConfig()
    """Local mode: repository sources, environment recipes and the host cache."""
    test_cmd: list[str] = Field(default_factory=lambda: list(DEFAULT_TEST_CMD))
    """The pytest command (the test files or ids are appended); it must report with `-rA` (and `-v`, for skipped
    tests to be named) for grading to read it."""
    test_cmds: dict[str, list[str]] = Field(default_factory=dict)
    """`owner/name` -> its test command, for repos that need another one."""
    run_by_id: list[str] = Field(default_factory=lambda: ["python/mypy"])
    """Repos (`owner/name`) whose graded tests run by test id rather than by file: mypy's cases are data-driven, so
    its ids all name `mypy/test/testcheck.py`, whose whole run takes many minutes."""
    test_timeout_s: float = Field(default=1800.0, gt=0)
    """Wall-clock limit of one grading test run; a run that hits it is unresolved."""
    image_env: dict[str, str] = Field(default_factory=lambda: {"PATH": IMAGE_PATH})
    """Process environment of every command in an image box (the agent's and grading's)."""


class SWEGymTask(vf.Task[SWEGymData, vf.State, SWEGymTaskConfig]):
    @property
    def key(self) -> str:
        return self.data.instance_id

    def row(self) -> SWEGymRow:
        d = self.data
        return SWEGymRow(
            instance_id=d.instance_id,
            repo=d.repo,
            base_commit=d.base_commit,
            problem_statement=d.prompt_text,
            patch=d.patch,
            test_patch=d.test_patch,
            version=d.version,
            fail_to_pass=tuple(d.fail_to_pass),
            pass_to_pass=tuple(d.pass_to_pass),
        )

    def runtime_env(self) -> dict[str, str]:
        if self.data.mode == "image":
            return dict(self.config.image_env)
        return venv_vars(env_path(self.config.local, self.row()))

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        if self.data.mode == "local":
            row = self.row()
            snapshot = await asyncio.to_thread(prepare_snapshot, self.config.local, row)
            await asyncio.to_thread(prepare_env, self.config.local, row, snapshot)
            commit = await box.clone_snapshot(runtime, snapshot)
            workdir = await box.workdir(runtime)
            # The box's absolute path is only known now; its tree must shadow the env's reference checkout.
            runtime.env = {**runtime.env, **box_env(self.config.local, row, workdir)}
        else:
            commit = await box.squash_to_base(runtime, self.data.base_commit, self.data.instance_id)
        trace.info["swe_gym"] = {"instance_id": self.data.instance_id, "box_commit": commit}

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        await vf.capture_patch(trace, runtime, base_commit=trace.info["swe_gym"]["box_commit"])

    def test_cmd(self) -> list[str]:
        return list(self.config.test_cmds.get(self.data.repo, self.config.test_cmd))

    async def grade(self, runtime: vf.Runtime, box_commit: str) -> grading.TestReport:
        """Reset the test files, apply the test patch, run the tests, and read the outcome."""
        d = self.data
        patch_file = f"/tmp/swe_gym_test_patch_{uuid.uuid4().hex}.diff"
        await runtime.write(patch_file, d.test_patch.encode())
        try:
            argv = grading.grade_argv(
                box_commit,
                patch_file,
                d.test_patch,
                self.test_cmd(),
                grading.directives_for(
                    d.test_patch, d.fail_to_pass, d.pass_to_pass, by_id=d.repo in self.config.run_by_id
                ),
                self.config.test_timeout_s,
            )
            result = await runtime.run(argv, {})
        finally:
            await box.remove(runtime, patch_file)
        output = (result.stdout or "") + (result.stderr or "")
        if result.exit_code != 0:
            if not await box.alive(runtime):
                raise vf.SandboxError(f"grading {d.instance_id}: the box stopped answering: {output[-300:]}")
            return grading.TestReport(
                False,
                0.0,
                0.0,
                list(d.fail_to_pass),
                list(d.pass_to_pass),
                error=f"grading script exited {result.exit_code}: {output.strip()[-500:]}",
            )
        return grading.report(output, d.fail_to_pass, d.pass_to_pass)

    async def _report(self, trace: vf.Trace, runtime: vf.Runtime) -> dict:
        info = trace.info.setdefault("swe_gym", {})
        if "report" not in info:
            box_commit = info.get("box_commit") or await box.head(runtime)
            info["report"] = (await self.grade(runtime, box_commit)).to_info()
        return info["report"]

    @vf.metric
    async def tests(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        """Pass fractions of the FAIL_TO_PASS and PASS_TO_PASS lists (grading runs once, here)."""
        report = await self._report(trace, runtime)
        return {"f2p_pass_fraction": report["f2p_pass_fraction"], "p2p_pass_fraction": report["p2p_pass_fraction"]}

    @vf.reward(weight=1.0)
    async def resolved(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """1.0 iff every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes."""
        return 1.0 if (await self._report(trace, runtime))["resolved"] else 0.0

    async def validate(self, runtime: vf.Runtime) -> bool:
        """The untouched repo must be unresolved and the gold patch resolved (both graded in this box)."""
        box_commit = await box.head(runtime)
        untouched = await self.grade(runtime, box_commit)
        if untouched.resolved:
            logger.warning("swe-gym: %s is resolved without any change", self.data.instance_id)
            return False
        applied = await box.apply_patch(runtime, self.data.patch)
        if applied:
            logger.warning("swe-gym: %s: the gold patch does not apply: %s", self.data.instance_id, applied)
            return False
        gold = await self.grade(runtime, box_commit)
        if not gold.resolved:
            logger.warning(
                "swe-gym: %s: the gold patch is unresolved (failing F2P %s, P2P %s; %s)",
                self.data.instance_id,
                gold.f2p_failed[:5],
                gold.p2p_failed[:5],
                gold.error,
            )
        return gold.resolved


class SWEGymTasksetConfig(vf.TasksetConfig):
    task: SWEGymTaskConfig = SWEGymTaskConfig()
    dataset: str = "SWE-Gym/SWE-Gym"
    """Hub dataset: `SWE-Gym/SWE-Gym` (2,438 instances) or `SWE-Gym/SWE-Gym-Lite` (230). Ignored with data_file."""
    split: str = "train"
    """Hub dataset split."""
    data_file: Path | None = None
    """A local JSONL or parquet file with SWE-Gym's fields, used instead of the hub."""
    repos: list[str] | None = None
    """Keep only these repositories (`owner/name`); None keeps all."""
    instance_ids: list[str] | None = None
    """Keep only these instance ids; None keeps all."""
    mode: Literal["image", "local"] = "image"
    """`image`: per-instance container images (docker / prime runtimes). `local`: the subprocess runtime with
    host-prepared snapshots and venvs (see docs/swe-gym.md for what it can run)."""
    image_template: str = "docker.io/xingyaoww/sweb.eval.x86_64.{docker_id}:latest"
    """Image name; `{docker_id}` is the lowercased instance id with `__` written `_s_` (SWE-Gym's published
    naming), `{instance_id}`, `{repo}` and `{version}` are also available."""
    image_workdir: str = "/testbed"
    """Where the repository lives in the images."""
    prompt_template: str = PROMPT
    """The agent's task text; `{problem_statement}`, `{repo}`, `{instance_id}` are filled in."""
    setup_timeout_s: float = Field(default=3600.0, gt=0)
    """Task setup limit; in local mode the first rollout of a repo and version builds its environment."""


def image_name(template: str, row: SWEGymRow) -> str:
    docker_id = row.instance_id.lower().replace("__", "_s_")
    return template.format(docker_id=docker_id, instance_id=row.instance_id, repo=row.repo, version=row.version)


class SWEGymTaskset(vf.Taskset[SWEGymTask, SWEGymTasksetConfig]):
    def rows(self) -> list[SWEGymRow]:
        """The configured rows, validated and filtered; refused rows are logged with their instance id."""
        c = self.config
        raws: Iterable = sources.read_file(c.data_file) if c.data_file else sources.read_hub(c.dataset, c.split)
        rows, errors = parse_rows(raws)
        for error in errors:
            logger.warning("swe-gym: skipping %s", error)
        kept, missing = select_rows(rows, c.repos, c.instance_ids)
        if missing:
            logger.warning("swe-gym: %d requested instance ids are not in the data: %s", len(missing), missing[:10])
        if not kept:
            raise ValueError(
                f"swe-gym loaded no instances ({len(rows)} valid rows, {len(errors)} refused, filters repos="
                f"{c.repos} instance_ids={c.instance_ids}); check data_file/dataset and the filters"
            )
        return kept

    def load(self) -> list[SWEGymTask]:
        c = self.config
        tasks = []
        for idx, row in enumerate(self.rows()):
            image = image_name(c.image_template, row) if c.mode == "image" else None
            data = SWEGymData(
                idx=idx,
                name=row.instance_id,
                prompt=c.prompt_template.format(
                    problem_statement=row.problem_statement, repo=row.repo, instance_id=row.instance_id
                ),
                image=image,
                workdir=c.image_workdir if image else None,
                timeout=vf.TaskTimeout(setup=c.setup_timeout_s),
                instance_id=row.instance_id,
                repo=row.repo,
                base_commit=row.base_commit,
                version=row.version,
                patch=row.patch,
                test_patch=row.test_patch,
                fail_to_pass=list(row.fail_to_pass),
                pass_to_pass=list(row.pass_to_pass),
                mode=c.mode,
            )
            tasks.append(SWEGymTask(data, c.task))
        return tasks
