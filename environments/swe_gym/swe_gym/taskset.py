"""swe-gym: SWE-Gym instances as verifiers v1 tasks, graded with SWE-bench semantics.

The agent gets the issue text and a box whose work directory holds the repository at `base_commit` (see
`box.py` for why the box's git history is a single commit). Before the agent starts, the box's files are listed
(sha256 each), its root pytest configuration read and the files' bytes carried out (`box.capture_baseline`), held in
the env server's memory. When it finishes every process of the rollout is killed and `composer_prime.grading` grades
a private copy of the tree: the agent's diff is computed on the host from the held bytes (`trace.info["patch"]`; no
git of the box runs after the agent), files the agent added outside the source folders are removed, its changes are
scanned for test machinery, every test file is written from the held bytes with the instance's `test_patch` applied
on the host (`grading.py`), and its FAIL_TO_PASS / PASS_TO_PASS tests run with canaries through the trusted launcher
(no network but loopback). Before any test file is written, the gold patch's recorded behaviour (`oracle.py`: the
calls the FAIL_TO_PASS tests make into the package, answered by the gold code, held on the host) is replayed against
the candidate in a fresh process. Reward `solved` is 1.0 iff every test passes, every replayed call is answered as
the gold answered it, and the grade is neither void nor timed out. Edits to test files (`conftest.py` included) do
not count; a forged pass voids the grade.

Runtimes: `mode = "image"` gives every task SWE-Gym's per-instance container image (docker, prime), the training
path; `mode = "local"` runs on the subprocess runtime with a snapshot and a venv prepared once on the host
(`local.py`). A local box is a host folder: the agent can read the host (the source clone that holds the fix
included) and write into the shared venv, which the taskset says in its log when it starts.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from composer_prime import grading as grader
from composer_prime.grading import interpreter
from composer_prime.grading.pytest_config import repo_settings
from composer_prime.grading.runtime import (
    host_tools,
    isolate_box,
    refuse_unless_hidden,
    refuse_without_grader_box,
    run_folders,
    warn_on_subprocess,
)
from composer_prime.teachers.judge import TeacherTaskConfig
from swe_gym import box, grading, sources
from swe_gym.local import (
    LocalConfig,
    box_env,
    env_path,
    prepare_env,
    prepare_snapshot,
    reference_code,
    venv_vars,
)
from swe_gym.oracle import Oracle, load_oracle, oracle_key, oracle_path, prepare_oracle
from swe_gym.rows import SWEGymRow, parse_rows, select_rows

logger = logging.getLogger(__name__)
_baselines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> the box's starting tree (`box.Baseline`), captured at setup, held in the env server's memory."""
_oracles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> the instance's oracle (`oracle.Oracle`, expected side included), read at setup, held on the host."""
_hidden: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> whether the agent could not read the instance's expected side (checked at setup)."""

PROMPT = """<uploaded_files>
{repo}
</uploaded_files>
The Python repository {repo} is checked out in your working directory. Consider the following issue:

<issue_description>
{problem_statement}
</issue_description>

Make the changes to the repository's non-test files that resolve the issue. Tests that check the fix already \
exist and will be run after you finish, so you do not need to write or modify tests."""

LOCAL_WARNING = (
    "swe-gym: local mode runs on the subprocess runtime: a rollout can read the host (the source clone holding "
    "the fix included) and write into the shared venv; train in image mode (docs/swe-gym.md)"
)
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
    """The gold fix; used by `validate` and, as `gold_patch`, by recipes/opsd-baseline.toml."""
    test_patch: str
    """The fix's tests, applied at grading time."""
    fail_to_pass: list[str]
    """Test ids the fix makes pass."""
    pass_to_pass: list[str]
    """Test ids that must keep passing."""
    mode: Literal["image", "local"]
    """How the box is made (the taskset's `mode`)."""

    @property
    def gold_patch(self) -> str:
        """The gold fix under a key of its own: PRIME-RL's `opsd` reads `demo_key` from `trace.info` first, where
        `patch` is the agent's own diff (recipes/opsd-baseline.toml)."""
        return self.patch


class SWEGymTaskConfig(TeacherTaskConfig):
    local: LocalConfig = LocalConfig()
    """Local mode: repository sources, environment recipes and the host cache."""
    python: str = "python"
    """The interpreter in the box that runs the grader's pytest launcher (found on the box's PATH; needs pytest)."""
    pythonpath: list[str] = Field(default_factory=lambda: [".", "src"])
    """Image mode: folders of the work tree that hold the code under test (local mode uses its env's)."""
    isolate_network: bool = True
    """Grade in a network namespace of its own (loopback up) where the box allows it; metric `network_isolated`."""
    isolate_processes: bool = True
    """Run the agent's commands in a PID namespace killed whole before grading (where the box allows one) and grade a
    private copy of the tree; False leaves only the reaper and grades the box's own folder (metric
    `process_isolated`)."""
    run_by_id: list[str] = Field(default_factory=lambda: ["python/mypy"])
    """Repos (`owner/name`) whose graded tests run by test id rather than by file: mypy's cases are data-driven, so
    its ids all name `mypy/test/testcheck.py`, whose whole run takes many minutes."""
    test_timeout_s: float = Field(default=1800.0, gt=0)
    """Wall-clock limit of one grading test run; a run that hits it is unresolved."""
    image_env: dict[str, str] = Field(default_factory=lambda: {"PATH": IMAGE_PATH})
    """Process environment of every command in an image box (the agent's and grading's)."""
    replay: Literal["require", "if-usable", "off"] = "require"
    """Replay the gold patch's recorded behaviour at grading (`oracle.py`). `require` (training): an instance trains
    only with a usable oracle, one that discriminates (neither a stub answering every call with one value nor the
    unfixed code passes it); instances whose recorded oracle is not usable (or, in image mode, that have none
    recorded in `oracle_dir`) are left out at load and counted, and in local mode an instance recorded at its first
    setup is refused there if its oracle is not usable. `if-usable` trains the rest on their tests alone (metric
    `replay_used` = 0, the reason on `trace.info["swe_gym"]["oracle"]`); `off` never replays. Local mode records a
    missing oracle at setup (once per host; `swe-gym-prepare` records them ahead); image mode reads `oracle_dir`."""
    oracle_dir: Path | None = None
    """Folder of recorded oracles (`<instance_id>.json`); default `<local.cache_dir>/oracles`, where local mode and
    `swe-gym-prepare` write them."""
    require_grader_box: bool = False
    """Refuse, at setup, a runtime that does not grade in a grader box (anything but docker or podman with
    `isolate_processes`): there grading runs tools the agent could have replaced, so a program of the agent's can
    run at grading (docs/grading.md, "Not guarded"). Set it for training runs."""
    expected_side: Literal["hidden", "readable"] = "hidden"
    """`hidden`: refuse, at setup, a rollout whose agent could read the instance's expected side on the host (the
    recorded oracles, the source clones and snapshots that hold the fix, the data file with the gold patch); on the
    subprocess runtime the rollout's jail covers them (root and isolate_processes needed), a container box never
    holds them. `readable`: run anyway (tests, evaluation), metric `expected_side_hidden` = 0."""
    rollout_network: list[str] = Field(default_factory=list)
    """Where the agent's commands may connect during the rollout: `[]` (no network but loopback), `["*"]` (open), or
    hosts (a package mirror; container runtimes only, through verifiers' network policy). On the subprocess runtime
    anything but `["*"]` closes it (a network namespace)."""
    hidden_paths: list[Path] = Field(default_factory=list)
    """More host paths the agent must not read; the oracles, mirrors, snapshots, local source clones and the data
    file are always hidden."""


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

    def hidden(self) -> list[str]:
        """Host paths of the expected side, absolute: the cache's oracles, mirrors and snapshots, every env's reference
        checkout and its installed copies (`local.reference_code`), the oracle folder, local source clones, and the
        configured ones (the taskset adds its data file)."""
        c = self.config
        root = c.local.root()
        paths = [root / "oracles", root / "mirrors", root / "snapshots", *c.hidden_paths]
        paths += [path for venv in sorted((root / "envs").glob("*/*/")) for path in reference_code(venv)]
        if c.oracle_dir is not None:
            paths.append(c.oracle_dir)
        paths += [Path(source) for source in c.local.repo_sources.values() if "://" not in source]
        return sorted({str(Path(p).expanduser().resolve()) for p in paths})

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        c = self.config
        if c.require_grader_box:
            refuse_without_grader_box(runtime, "swe-gym", c.isolate_processes)
        with host_tools(runtime) as host:
            if self.data.mode == "local":
                warn_on_subprocess(runtime, LOCAL_WARNING)
                row = self.row()
                snapshot = await asyncio.to_thread(prepare_snapshot, self.config.local, row)
                await asyncio.to_thread(prepare_env, self.config.local, row, snapshot)
                commit = await box.clone_snapshot(host, snapshot)
                workdir = await box.workdir(host)
                # The box's absolute path is only known now; its tree must shadow the env's reference checkout.
                runtime.env = {**runtime.env, **box_env(self.config.local, row, workdir)}
            else:
                commit = await box.squash_to_base(host, self.data.base_commit, self.data.instance_id)
            oracle = await asyncio.to_thread(self.oracle)
            baseline = await box.capture_baseline(host, grading.diff_paths(self.data.test_patch))
            fingerprint = await interpreter.fingerprint(host, self.config.python)
        _baselines[runtime] = baseline
        if oracle is not None:
            _oracles[runtime] = oracle
        if self.data.mode == "local":  # the jail is made last, once the host's preparations exist to be covered
            for folder in ("oracles", "mirrors", "snapshots"):
                (c.local.root() / folder).mkdir(parents=True, exist_ok=True)
        hidden = self.hidden()
        await isolate_box(runtime, c.isolate_processes, hidden, network=c.rollout_network != ["*"])
        _hidden[runtime] = await refuse_unless_hidden(runtime, "swe-gym", hidden, allow=c.expected_side == "readable")
        trace.info["swe_gym"] = {
            "instance_id": self.data.instance_id,
            "box_commit": commit,
            "held_files": len(baseline.held),
            "files": len(baseline.files),
            "interpreter": fingerprint,
            "oracle": oracle.summary() if oracle is not None else {"usable": False, "reason": "not recorded"},
        }

    def oracle(self) -> Oracle | None:
        """The instance's oracle on this host (local mode: recorded now if missing or stale); None with `replay =
        "off"` or where none is recorded. With `replay = "require"`, no usable oracle raises `vf.SandboxError`."""
        c = self.config
        if c.replay == "off":
            return None
        row = self.row()
        if self.data.mode == "local":
            snapshot = prepare_snapshot(c.local, row)
            prepare_env(c.local, row, snapshot)
            found = prepare_oracle(c.local, row, snapshot, c.test_timeout_s)
        else:
            found = load_oracle(oracle_path(c.oracle_dir or c.local.root() / "oracles", row.instance_id))
        if c.replay == "require" and (found is None or not found.usable):
            why = "none is recorded" if found is None else f"{found.reason} ({found.detail or 'see oracle.py'})"
            raise vf.SandboxError(
                f'swe-gym: replay = "require" refuses {row.instance_id}: it has no usable oracle: {why}. Drop the '
                'instance from instance_ids, record its oracle with swe-gym-prepare, or set replay = "if-usable"'
            )
        return found

    def suite(self, settings: dict[str, str]) -> grader.Suite:
        d = self.data
        by_id = d.repo in self.config.run_by_id
        pythonpath = self.config.pythonpath
        if d.mode == "local":
            pythonpath = self.config.local.env_for(d.repo).pythonpath
        return grader.Suite(
            fail_to_pass=d.fail_to_pass,
            pass_to_pass=d.pass_to_pass,
            targets=grading.directives_for(d.test_patch, d.fail_to_pass, d.pass_to_pass, by_id=by_id),
            timeout_s=self.config.test_timeout_s,
            isolate_network=self.config.isolate_network,
            private_copy=self.config.isolate_processes,
            python=self.config.python,
            pythonpath=pythonpath,
            settings=settings,
            hidden=self.hidden(),
        )

    def _remove_deleted(self, deleted: list[str]) -> Callable[[vf.Runtime], Awaitable[str | None]]:
        async def remove(runtime: vf.Runtime) -> str | None:
            if deleted:
                result = await runtime.run(["rm", "-rf", "--", *deleted], {})
                if result.exit_code != 0:
                    return f"removing the files the test patch deletes failed: {(result.stderr or '')[-300:]}"
            return None

        return remove

    async def grade(
        self,
        runtime: vf.Runtime,
        baseline: box.Baseline,
        interpreter_before: dict[str, str] | None = None,
        oracle: Oracle | None = None,
    ) -> grader.Grade:
        """Kill the rollout's processes, copy the tree to a private folder, replay the `oracle`'s calls (where it is
        usable), clean and scan the tree, write every test file (held from the starting tree, test patch applied on
        the host) over the agent's, run the tests, judge. With `interpreter_before` (the setup fingerprint) the
        grading interpreter is checked beside the test run. Nothing of the box's git runs: starting texts and the
        agent's diff come from the host-held `baseline`."""
        tests = grading.diff_paths(self.data.test_patch)
        held = {path: data for path in baseline.held if (data := baseline.content(path)) is not None}
        try:
            patched, deleted = grading.patched_tests(held, self.data.test_patch)
        except grading.TestPatchError as exc:
            return grader.Grade(error=str(exc)[:1000])
        settings = repo_settings(baseline.configs)
        test_files = grading.test_files(baseline.files, tests, self.data, settings)
        owned = {path: held[path] for path in test_files if path in held and path not in deleted}
        trusted = grader.Baseline(
            files=baseline.files,
            content=baseline.content,
            owned={**owned, **patched},
            unheld=frozenset(path for path in test_files if path not in held and path not in patched),
        )
        suite = self.suite(settings)

        async def interpreter_changes(where: vf.Runtime) -> list[str]:
            return interpreter.changes(
                interpreter_before or {}, await interpreter.fingerprint(where, self.config.python)
            )

        check = interpreter_changes if interpreter_before is not None else None
        calls = oracle.calls if oracle is not None and oracle.usable else None
        regression = oracle.regression if oracle is not None else None  # with a usable oracle or without one
        grade = await grader.grade(
            runtime,
            suite,
            trusted,
            before_run=self._remove_deleted(deleted),
            calls=calls,
            check=check,
            regression=regression,
        )
        grade.expected_hidden = _hidden.get(runtime, True)
        if calls is None:
            grade.replay_note = (
                "no oracle (replay off)"
                if self.config.replay == "off"
                else (f"no usable oracle: {oracle.reason}" if oracle is not None else "no oracle recorded")
            )
        return grade

    async def _grade(self, trace: vf.Trace, runtime: vf.Runtime) -> dict:
        info = trace.info.setdefault("swe_gym", {})
        if "grading" not in trace.info:
            baseline = _baselines.get(runtime)
            if baseline is None:  # the box is past its setup: what it holds now is the agent's, not a baseline
                grade = grader.Grade(
                    error="swe-gym: no starting tree is held for this box (its setup did not run here)"
                )
            else:
                grade = await self.grade(runtime, baseline, info.get("interpreter"), _oracles.get(runtime))
            trace.info["grading"] = grade.info()
            trace.info["patch"] = grade.patch
        return trace.info["grading"]

    @vf.metric
    async def tests(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        """The grading module's metrics (grading runs once, here or in the reward)."""
        return dict((await self._grade(trace, runtime))["metrics"])

    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        """1.0 iff every FAIL_TO_PASS test passes, every PASS_TO_PASS test still passes, and the grade stands."""
        return 1.0 if (await self._grade(trace, runtime))["solved"] else 0.0

    async def validate(self, runtime: vf.Runtime) -> bool:
        """The untouched repo must be unresolved and the gold patch resolved (both graded in this box, with the
        oracle's replay where there is a usable one)."""
        baseline = await box.capture_baseline(runtime, grading.diff_paths(self.data.test_patch))
        oracle = _oracles.get(runtime)
        untouched = await self.grade(runtime, baseline, oracle=oracle)
        if untouched.solved:
            logger.warning("swe-gym: %s is resolved without any change", self.data.instance_id)
            return False
        applied = await box.apply_patch(runtime, self.data.patch)
        if applied:
            logger.warning("swe-gym: %s: the gold patch does not apply: %s", self.data.instance_id, applied)
            return False
        gold = await self.grade(runtime, baseline, oracle=oracle)
        if not gold.solved:
            logger.warning(
                "swe-gym: %s: the gold patch is unresolved (failing F2P %s, P2P %s; replay %s; error %s; void %s)",
                self.data.instance_id,
                gold.fail_to_pass_failed[:5],
                gold.pass_to_pass_failed[:5],
                gold.replay_mismatches[:3],
                gold.error,
                gold.void,
            )
        return gold.solved


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

    def replayable(self, rows: list[SWEGymRow]) -> list[SWEGymRow]:
        """With `task.replay = "require"`, the rows that may have a usable oracle: those whose recorded oracle (for
        this row, by its key) is usable, and in local mode those not recorded yet (recorded at their first setup,
        refused there if not usable). The rest are counted by reason and left out."""
        c = self.config
        if c.task.replay != "require":
            return rows
        folder = c.task.oracle_dir or c.task.local.root() / "oracles"
        kept, left = [], {}
        for row in rows:
            found = load_oracle(oracle_path(folder, row.instance_id))
            if c.mode == "local" and (found is None or found.key != oracle_key(c.task.local, row)):
                kept.append(row)
            elif found is not None and found.usable:
                kept.append(row)
            else:
                reason = "no oracle recorded" if found is None else found.reason or "no calls kept"
                left[reason] = left.get(reason, 0) + 1
        if left:
            logger.warning(
                'swe-gym: replay = "require" leaves out %d of %d instance(s) without a usable oracle (%s); '
                'set task.replay = "if-usable" to train them on their tests alone',
                sum(left.values()),
                len(rows),
                ", ".join(f"{reason}: {count}" for reason, count in sorted(left.items())),
            )
        if not kept:
            raise ValueError(
                f"swe-gym: none of {len(rows)} instance(s) has a usable oracle in {folder} (record them with "
                'swe-gym-prepare, or set task.replay = "if-usable" to train on tests alone)'
            )
        return kept

    def load(self) -> list[SWEGymTask]:
        c = self.config
        # the rows' source holds every instance's gold patch: the data file, or the hub's caches on this host
        hidden = [
            *c.task.hidden_paths,
            *([c.data_file.expanduser().resolve()] if c.data_file else sources.hub_caches()),
            *run_folders(),  # PRIME-RL's run folder: earlier rollouts' grading reports
        ]
        config = c.task.model_copy(update={"hidden_paths": hidden})
        tasks = []
        for idx, row in enumerate(self.replayable(self.rows())):
            image = image_name(c.image_template, row) if c.mode == "image" else None
            data = SWEGymData(
                idx=idx,
                name=row.instance_id,
                prompt=c.prompt_template.format(
                    problem_statement=row.problem_statement, repo=row.repo, instance_id=row.instance_id
                ),
                image=image,
                workdir=c.image_workdir if image else None,
                network_allow=list(c.task.rollout_network) if image else ["*"],
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
            tasks.append(SWEGymTask(data, config))
        return tasks
