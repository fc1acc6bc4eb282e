"""feature-deletion: a tested feature was deleted from a real repository; the agent rebuilds it.

Tasks come from `composer-prime mine-features` (rows of `composer_prime.mining.record.MinedTask`, each naming the
scrubbed repository state it was mined from, a tarball beside the tasks file read once at load), or from a dataset
folder built by `composer-prime corpus-dataset` (the same rows in parquet shards, the tarballs in its `bases` config). `setup` unpacks
that state into the rollout's work directory, removes the held-out test files, applies the deletion's changes and
commits the result as a fresh one-commit git repository (no history, no bytecode or caches), and fingerprints the
grading interpreter; where the box allows it, the agent's commands run in a PID namespace of the rollout's own. At
scoring every process the rollout started is killed (the namespace whole), the tree is copied to a folder the agent
never saw, the deleted feature's recorded calls
are replayed against the candidate in a fresh process (answers judged on the host), then `composer_prime.grading`
grades the box: files the agent added outside the task's source folders are removed, the
task's test files (held-out ones included) are written over the agent's, changed Python files are scanned for test
machinery, canary tests are planted, and the suite runs once through the trusted launcher (`python -I -S`, pinned
`-c`/`--rootdir`, no network but loopback). Reward `solved` is 1.0 when every FAIL_TO_PASS test passes, no
PASS_TO_PASS test breaks, every recorded call is answered as recorded and the grade is neither void nor timed out,
else 0.0; the metrics are the grading
module's. The agent's diff (`trace.info["patch"]`) is computed at grading on the host, from the task's snapshot and
the graded copy: no git of the box runs after the agent (a clean filter it configured would run with it). `validate` applies the gold patch and expects 1.0 (verifiers 0.4.0 also scores the untouched repository
and expects less).

On the subprocess runtime the box is a host folder: a rollout can read the host (the target library's installed
or vendored copies included) and write into shared environments. The grader ignores `.pth` code and start-up hooks
and voids forged passes, but only an image runtime keeps the box clean; the taskset says so when it starts.
"""

from __future__ import annotations

import base64
import functools
import logging
import weakref
from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field

from composer_prime import grading
from composer_prime.grading import interpreter, tree
from composer_prime.grading.pytest_config import CONFIG_NAMES, repo_settings
from composer_prime.grading.runtime import (
    git_dirs,
    host_tools,
    isolate_box,
    refuse_unless_hidden,
    refuse_without_grader_box,
    run_checked,
    run_folders,
    warn_on_subprocess,
)
from composer_prime.mining.record import MinedTask, load_rows
from composer_prime.mining.snapshot import task_tree, unpack_tree
from composer_prime.teachers.judge import TeacherTaskConfig

logger = logging.getLogger(__name__)

SYSTEM = (
    "You are a software engineer working in a Python repository (your current directory). Part of the code base "
    "was removed; rebuild it as described, in the files where it belongs. Read the surrounding code and its call "
    "sites first, run the visible tests, and finish once the feature works. Test files are restored before grading."
)
SNAPSHOT_FILE = ".feature-deletion-snapshot.tar.gz"
COMMIT_SNAPSHOT = (
    "git init -q && git symbolic-ref HEAD refs/heads/main && git add -A && git -c user.name=composer-prime "
    "-c user.email=composer-prime@localhost commit -q --no-verify -m 'Task snapshot' && rm -f .git/hooks/*"
)
GOLD_FILE = ".feature-deletion-gold.patch"
_interpreters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> the grading interpreter's fingerprint taken at setup, held in the env server's memory, not the box."""
_hidden: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> whether the agent could not read the task's expected side (checked at setup)."""
PATCH_CAP_BYTES = 200_000
SAMPLE_TASKS = Path(__file__).resolve().parent / "sample" / "toolz-1.2.0.jsonl"
"""The bundled sample: three tasks mined from the PyPI sdist of toolz 1.2.0 (BSD-3-Clause), loaded when `tasks` is
unset so that `vf-eval feature-deletion` runs without a mining step (environments/feature_deletion/README.md)."""
SUBPROCESS_WARNING = (
    "feature-deletion: the subprocess runtime shares the host with the agent: a rollout can read installed or "
    "vendored copies of the target library and write into shared environments; train on an image runtime "
    "(docs/feature-deletion.md)"
)


class FeatureDeletionData(vf.TaskData):
    mined: MinedTask
    """The mined row: changes, test files, FAIL_TO_PASS / PASS_TO_PASS ids, gold patch, test command."""
    base: str
    """Base64 of the repository-state tarball the row names (shared by the tasks of one state)."""

    @property
    def gold_patch(self) -> str:
        """The gold patch, under a key of its own: PRIME-RL's `opsd` reads `demo_key` from `trace.info` first, where
        `patch` is the agent's own diff (recipes/opsd-baseline.toml)."""
        return self.mined.gold_patch


class FeatureDeletionTaskConfig(TeacherTaskConfig):
    test_cmd: list[str] | None = None
    """Pytest launcher in the box, replacing the task's own (e.g. `["python3", "-m", "pytest"]` in an image)."""
    test_timeout_s: float | None = Field(None, gt=0)
    """Limit for the grading run of the suite, in seconds; None keeps the task's own."""
    isolate_network: bool = True
    """Grade in a network namespace of its own (loopback up) where the box allows it; metric `network_isolated`."""
    python: str | None = None
    """Interpreter in the box that runs the grader (it needs pytest); None takes the test command's (`python`)."""
    isolate_processes: bool = True
    """Run the agent's commands in a PID namespace killed whole before grading (where the box allows one) and grade a
    private copy of the tree; False leaves only the reaper and grades the box's own folder (metric
    `process_isolated`)."""
    require_grader_box: bool = False
    """Refuse, at setup, a runtime that does not grade in a grader box (anything but docker or podman with
    `isolate_processes`): there grading runs tools the agent could have replaced, so a program of the agent's can
    run at grading (docs/grading.md, "Not guarded"). Set it for training runs."""
    replay: Literal["require", "if-usable"] = "require"
    """`require`: a task trains only with recorded behaviour to replay (the reward is decided by the replay, judged on
    the host, before the tests); tasks without it are left out at load and counted. `if-usable`: they train on their
    tests alone, metric `replay_used` = 0 (docs/grading.md, "The trust chain")."""
    expected_side: Literal["hidden", "readable"] = "hidden"
    """`hidden`: refuse, at setup, a rollout whose agent could read the task's expected side on the host (the tasks
    file with its gold patches and recorded answers, the repository tarballs); on the subprocess runtime the
    rollout's jail covers them (root and isolate_processes needed), a container box never holds them. `readable`:
    run anyway (tests, evaluation), metric `expected_side_hidden` = 0."""
    rollout_network: list[str] = Field(default_factory=list)
    """Where the agent's commands may connect during the rollout: `[]` (no network but loopback: a package is
    otherwise one `pip download` away), `["*"]` (open), or hosts (a package mirror; container runtimes only, through
    verifiers' network policy). On the subprocess runtime anything but `["*"]` closes it (a network namespace)."""
    hidden_paths: list[Path] = Field(default_factory=list)
    """More host paths the agent must not read (the orchestrator's output folder, a mirror of the tasks); the tasks
    file and its tarballs (or the dataset folder) are always hidden."""


class FeatureDeletionConfig(vf.TasksetConfig):
    tasks: Path | None = None
    """Tasks file written by `composer-prime mine-features` (JSON lines), or a Feature Deletion dataset folder
    (`composer-prime corpus-dataset`: parquet shards named by its README.md, tarballs in its `bases` config); None
    loads the bundled sample of three tasks mined from toolz 1.2.0 (`SAMPLE_TASKS`)."""
    task: FeatureDeletionTaskConfig = FeatureDeletionTaskConfig()


@functools.lru_cache(maxsize=8)
def base_files(base: str) -> dict[str, bytes]:
    """The files of a repository-state tarball (base64), read on the host."""
    return unpack_tree(base64.b64decode(base))


@functools.lru_cache(maxsize=64)
def read_base(path: Path) -> str:
    """A repository-state tarball as base64, read once per file."""
    if not path.is_file():
        raise FileNotFoundError(
            f"feature-deletion: {path} is missing; it is written by mine-features next to the tasks file and must "
            "stay beside it"
        )
    return base64.b64encode(path.read_bytes()).decode("ascii")


def read_dataset_rows(folder: Path) -> tuple[list[tuple[MinedTask, str]], list[str]]:
    """The rows of a dataset folder with their tarballs (base64), and one message per bad row."""
    try:
        from composer_prime.corpus.dataset import DatasetInputError, read_dataset

        tasks, errors = read_dataset(folder)
    except ImportError as exc:
        raise ImportError(
            f"feature-deletion: tasks = {str(folder)!r} is a dataset folder; reading it needs pyarrow and PyYAML "
            f"({exc.name or 'one of them'} is missing): `pip install 'feature-deletion[dataset]'`"
        ) from None
    except DatasetInputError as exc:
        raise FileNotFoundError(f"feature-deletion: tasks = {str(folder)!r}: {exc}") from None
    return [(item.task, item.base) for item in tasks], errors


class FeatureDeletionTask(vf.Task[FeatureDeletionData, vf.State, FeatureDeletionTaskConfig]):
    @property
    def test_timeout_s(self) -> float:
        return self.config.test_timeout_s or self.data.mined.test_timeout_s

    @property
    def python(self) -> str:
        cmd = self.config.test_cmd or self.data.mined.test_cmd
        return self.config.python or (cmd[0] if cmd[1:3] == ["-m", "pytest"] else "python")

    async def setup(self, runtime: vf.Runtime) -> None:
        c = self.config
        if c.require_grader_box:
            refuse_without_grader_box(runtime, "feature-deletion", c.isolate_processes)
        warn_on_subprocess(runtime, SUBPROCESS_WARNING)
        hidden = self.hidden()
        await isolate_box(runtime, c.isolate_processes, hidden, network=c.rollout_network != ["*"])
        _hidden[runtime] = await refuse_unless_hidden(
            runtime, "feature-deletion", hidden, allow=c.expected_side == "readable"
        )
        mined = self.data.mined
        with host_tools(runtime) as host:
            await host.write(SNAPSHOT_FILE, base64.b64decode(self.data.base))
            await run_checked(host, ["tar", "-xzf", SNAPSHOT_FILE], "feature-deletion: unpacking the repository state")
            gone = [path for path, edits in mined.changes.items() if edits is None]
            await run_checked(
                host,
                ["rm", "-f", "--", SNAPSHOT_FILE, *mined.held_out, *gone],
                "feature-deletion: removing held-out files",
            )
            tree = task_tree(base_files(self.data.base), mined.held_out, mined.changes)
            for path, edits in mined.changes.items():
                if edits is not None:
                    await host.write(path, tree[path])
            await run_checked(host, ["sh", "-c", COMMIT_SNAPSHOT], "feature-deletion: committing the snapshot")
            _interpreters[runtime] = await interpreter.fingerprint(host, self.python)

    def hidden(self) -> list[str]:
        """Host paths of the expected side, absolute: the configured ones (the taskset adds the tasks' own)."""
        return [str(Path(p).expanduser().resolve()) for p in self.config.hidden_paths]

    def suite(self) -> grading.Suite:
        mined = self.data.mined
        base = base_files(self.data.base)
        tests = [*mined.fail_to_pass, *mined.pass_to_pass]
        return grading.Suite(
            fail_to_pass=mined.fail_to_pass,
            pass_to_pass=mined.pass_to_pass,
            baseline_outcomes=mined.baseline_outcomes,
            targets=sorted({test.split("::", 1)[0] for test in tests}),
            timeout_s=self.test_timeout_s,
            isolate_network=self.config.isolate_network,
            python=self.python,
            private_copy=self.config.isolate_processes,
            hidden=self.hidden(),
            settings=repo_settings(
                {name: base[name].decode("utf-8", "replace") for name in CONFIG_NAMES if name in mined.test_files}
            ),
        )

    def baseline(self) -> grading.Baseline:
        mined = self.data.mined
        base = base_files(self.data.base)
        files = task_tree(base, mined.held_out, mined.changes)
        return grading.Baseline(
            files={path: tree.sha256(data) for path, data in files.items()},
            content=files.get,
            owned={path: base[path] for path in mined.test_files if path in base},
        )

    async def grade(self, runtime: vf.Runtime) -> grading.Grade:
        """Kill the rollout's processes, then grade a private copy of the box's tree (`composer_prime.grading`)."""
        before = _interpreters.get(runtime)

        async def interpreter_changes(where: vf.Runtime) -> list[str]:
            return interpreter.changes(before, await interpreter.fingerprint(where, self.python))

        check = interpreter_changes if before is not None else None
        mined = self.data.mined
        grade = await grading.grade(
            runtime,
            self.suite(),
            self.baseline(),
            calls=mined.behaviour,
            check=check,
            regression=mined.pass_to_pass_behaviour,
        )
        grade.expected_hidden = _hidden.get(runtime, True)
        return grade

    @vf.metric
    async def tests(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        grade = await self.grade(runtime)
        trace.info["grading"] = grade.info()
        trace.info["patch"] = grade.patch[:PATCH_CAP_BYTES]
        return grade.metrics()

    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        return float(bool((trace.info.get("grading") or {}).get("solved")))

    async def validate(self, runtime: vf.Runtime) -> bool:
        """The gold patch must solve the task (0.4.0's validate also checks that the untouched repo does not)."""
        await runtime.write(GOLD_FILE, self.data.mined.gold_patch.encode("utf-8"))
        await run_checked(runtime, ["git", "apply", GOLD_FILE], "feature-deletion: applying the gold patch")
        await run_checked(runtime, ["rm", "-f", GOLD_FILE], "feature-deletion: removing the gold patch")
        grade = await self.grade(runtime)
        if not grade.solved:
            logger.warning(
                "feature-deletion: gold patch of %s does not solve it: error %s, void %s, failing %s",
                self.data.name,
                grade.error,
                grade.void,
                (grade.fail_to_pass_failed + grade.pass_to_pass_failed)[:5],
            )
        return grade.solved


class FeatureDeletionTaskset(vf.Taskset[FeatureDeletionTask, FeatureDeletionConfig]):
    load_errors: tuple[str, ...] = ()
    """Set by `load`: one message per bad row of the tasks file or dataset (row number, field, value); those rows are
    skipped."""

    def load(self) -> list[FeatureDeletionTask]:
        path = self.config.tasks
        if path is None:
            path = SAMPLE_TASKS
            logger.info(
                "feature-deletion: no tasks file set; loading the bundled sample (%s, mined from toolz 1.2.0). Mine "
                "your own with `composer-prime mine-features --repo REPO --out PATH` and set `tasks`",
                path.name,
            )
        if path.is_dir():
            rows, errors = read_dataset_rows(path)
        elif path.is_file():
            loaded, errors = load_rows(path)
            rows = [(row, read_base(path.parent / row.base)) for row in loaded]
        else:
            raise FileNotFoundError(
                f"feature-deletion: tasks = {str(path)!r}: no such file or folder; mine a tasks file with "
                "mine-features, or build a dataset folder with `composer-prime corpus-dataset`"
            )
        self.load_errors = tuple(errors)
        for error in self.load_errors:
            logger.warning("feature-deletion: %s: %s; the row is skipped", path, error)
        if not rows:
            raise ValueError(f"feature-deletion: no valid task in {path}: " + "; ".join(self.load_errors[:3]))
        c = self.config.task
        if c.replay == "require":
            unreplayed = [row.task_id for row, _ in rows if not row.behaviour]
            rows = [(row, base) for row, base in rows if row.behaviour]
            if unreplayed:
                logger.warning(
                    "feature-deletion: %d task(s) of %s have no recorded behaviour to replay and are left out (%s); "
                    'set task.replay = "if-usable" to train them on their tests alone',
                    len(unreplayed),
                    path,
                    ", ".join(unreplayed[:5]),
                )
            if not rows:
                raise ValueError(
                    f"feature-deletion: no task in {path} has recorded behaviour to replay (mined with "
                    '--min-replayed-calls 0?); set task.replay = "if-usable" to train on their tests alone'
                )
        source = path.resolve()
        expected = {source} if source.is_dir() else {source, *(source.parent / row.base for row, _ in rows)}
        expected |= set(git_dirs(source))  # a committed tasks file (the bundled sample) is in the repository's objects
        expected |= set(run_folders())  # PRIME-RL's run folder: earlier rollouts' grading reports
        config = c.model_copy(update={"hidden_paths": [*c.hidden_paths, *sorted(expected)]})
        tasks = []
        for idx, (row, base) in enumerate(rows):
            limit = self.config.task.test_timeout_s or row.test_timeout_s
            data = FeatureDeletionData(
                base=base,
                idx=idx,
                name=row.task_id,
                prompt=row.prompt,
                system_prompt=SYSTEM,
                mined=row,
                image=row.image,
                network_allow=list(c.rollout_network) if row.image else ["*"],
                timeout=vf.TaskTimeout(scoring=2 * limit + 120),
            )
            tasks.append(FeatureDeletionTask(data, config))
        return tasks
