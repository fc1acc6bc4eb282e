"""swe-gym local mode on a real git history: real snapshots, real venvs, real pytest runs in subprocess boxes.

Each box goes through what a rollout does around the agent: `setup` (snapshot clone + env), the "agent" edits
(here: a patch applied with git, or files written), `finalize` (patch capture) and `score` (grading).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import verifiers.v1 as vf
from swe_gym.local import LocalConfig, PrepError, env_path, prepare_env, prepare_snapshot
from swe_gym.prepare import fresh_box
from swe_gym.rows import parse_rows
from swe_gym.taskset import SWEGymTask, SWEGymTaskset, SWEGymTasksetConfig

from tests.support.swegym_repo import (
    FAIL_TO_PASS,
    FIX_SECRET,
    ToyInstance,
    build_toy_instance,
    git,
    local_task_config,
    write_jsonl,
)

Action = Callable[[vf.Runtime], Awaitable[Any]]
METRICS = {
    "fail_to_pass": 1.0,
    "pass_to_pass": 1.0,
    "replay": 1.0,
    "replay_used": 1.0,
    "expected_side_hidden": 1.0,
    "network_isolated": 1.0,
    "process_isolated": float(
        subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode == 0
    ),
    "timed_out": 0.0,
    "void": 0.0,
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> ToyInstance:
    return build_toy_instance(tmp_path_factory.mktemp("swegym-src"))


@pytest.fixture(scope="module")
def task(toy: ToyInstance, tmp_path_factory: pytest.TempPathFactory) -> SWEGymTask:
    root = tmp_path_factory.mktemp("swegym-local")
    config = SWEGymTasksetConfig(
        data_file=write_jsonl(root / "rows.jsonl", [toy.row]),
        mode="local",
        task=local_task_config(root / "cache", toy.repo),
    )
    (only,) = SWEGymTaskset(config).load()
    return only


async def in_box(
    task: SWEGymTask, action: Action | None = None, score: bool = True, before: Action | None = None
) -> tuple[vf.Trace, Any]:
    """[before ->] setup -> action -> finalize -> score in a fresh subprocess box; returns the trace and the
    action's result."""
    runtime, trace = fresh_box(task, "swegym-test")
    await runtime.start()
    try:
        if before is not None:
            await before(runtime)
        await task.setup(trace, runtime)
        result = await action(runtime) if action is not None else None
        if score:
            await task.finalize(trace, runtime)
            await task.score(trace, runtime)
        return trace, result
    finally:
        await runtime.stop()


def box(
    task: SWEGymTask, action: Action | None = None, score: bool = True, before: Action | None = None
) -> tuple[vf.Trace, Any]:
    return asyncio.run(asyncio.wait_for(in_box(task, action, score, before), 180))


async def sh(runtime: vf.Runtime, command: str) -> str:
    result = await runtime.run(["bash", "-c", command], {})
    assert result.exit_code == 0, f"{command}: {result.stderr}"
    return result.stdout


def applying(patch: str) -> Action:
    async def apply(runtime: vf.Runtime) -> None:
        await runtime.write("agent.diff", patch.encode())
        await sh(runtime, "git apply agent.diff && rm agent.diff")

    return apply


def test_gold_patch_scores_one_and_is_captured(task: SWEGymTask, toy: ToyInstance) -> None:
    trace, _ = box(task, applying(toy.row["patch"]))
    assert trace.rewards["solved"].score == 1.0
    assert trace.metrics == METRICS
    grading = trace.info["grading"]
    assert grading["solved"] and grading["exit_code"] == 1 and grading["error"] is None and grading["void"] == []
    # The agent's diff is captured against the box commit and is the gold fix itself.
    assert trace.info["patch"].startswith("diff --git a/calc/ops.py b/calc/ops.py")
    assert f"+    {FIX_SECRET}" in trace.info["patch"]


def test_untouched_repo_scores_zero(task: SWEGymTask) -> None:
    trace, _ = box(task)
    assert trace.rewards["solved"].score == 0.0
    # the starting code answers the gold's FAIL_TO_PASS calls otherwise (clamp above hi): the replay fails too; the
    # PASS_TO_PASS calls of the same files (recorded beside them) it answers as the gold
    assert {**trace.metrics, "replay": 0.0} == {**METRICS, "fail_to_pass": 0.0, "replay": 0.0}
    assert 0.0 < trace.metrics["replay"] < 1.0
    assert trace.info["grading"]["replay_calls"] > 0
    assert trace.info["patch"] == ""
    assert trace.info["grading"]["fail_to_pass_failed"] == FAIL_TO_PASS


def test_patch_that_breaks_a_pass_to_pass_test_scores_zero(task: SWEGymTask, toy: ToyInstance) -> None:
    async def fix_but_break_add(runtime: vf.Runtime) -> None:
        await applying(toy.row["patch"])(runtime)
        await sh(runtime, "sed -i 's/return a + b/return a - b/' calc/ops.py")

    trace, _ = box(task, fix_but_break_add)
    assert trace.rewards["solved"].score == 0.0
    # the broken `add` is caught twice: by its PASS_TO_PASS test and by the replay of that test's recorded call
    assert {**trace.metrics, "replay": 1.0} == {**METRICS, "pass_to_pass": 0.75}
    assert trace.metrics["replay"] < 1.0
    assert trace.info["grading"]["pass_to_pass_failed"] == ["tests/test_ops.py::test_add"]


def test_edits_to_the_graded_tests_do_not_count(task: SWEGymTask) -> None:
    async def fake_the_tests(runtime: vf.Runtime) -> None:
        # Pre-create the fix's new test file and weaken the existing one: grading resets both.
        await runtime.write("tests/test_clamp.py", b"def test_clamp_range():\n    pass\n")
        await sh(runtime, "printf '\\n\\ndef test_clamp_high():\\n    pass\\n' >> tests/test_ops.py")

    trace, _ = box(task, fake_the_tests)
    assert trace.rewards["solved"].score == 0.0
    assert trace.metrics["fail_to_pass"] == 0.0
    assert "tests/test_clamp.py" in trace.info["patch"]  # captured before grading, so the attempt is on record


def test_a_test_file_the_host_holds_no_copy_of_voids_when_changed(
    task: SWEGymTask, toy: ToyInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no budget left for the starting tree, only the test patch's files are held: the gold fix still scores
    1.0, and an edit to `tests/conftest.py` (a test file the host could not restore) voids."""
    from swe_gym import box as swe_box

    monkeypatch.setattr(swe_box, "HELD_BYTES", 0)
    gold, _ = box(task, applying(toy.row["patch"]))
    assert gold.rewards["solved"].score == 1.0, gold.info["grading"]
    assert gold.info["swe_gym"]["held_files"] == 1  # tests/test_ops.py; the patch adds tests/test_clamp.py

    async def edit_conftest(runtime: vf.Runtime) -> None:
        await applying(toy.row["patch"])(runtime)
        await sh(runtime, "printf '\\n\\n@pytest.fixture\\ndef extra():\\n    return 1\\n' >> tests/conftest.py")

    edited, _ = box(task, edit_conftest)
    assert edited.info["grading"]["void"] == [
        "tests/conftest.py: a test file changed and the host holds no copy of it to restore"
    ]


def test_require_grader_box_refuses_the_subprocess_runtime(task: SWEGymTask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task.config, "require_grader_box", True)
    with pytest.raises(vf.SandboxError, match="the SubprocessRuntime has no grader box") as refused:
        box(task)
    assert "Train on the docker or podman runtime with isolate_processes = true" in str(refused.value)


async def inspect(runtime: vf.Runtime, toy: ToyInstance) -> dict[str, str]:
    return {
        "commits": await sh(runtime, "git rev-list --all"),
        "refs": await sh(runtime, "git for-each-ref --format='%(refname)'"),
        "tags": await sh(runtime, "git tag -l"),
        "remotes": await sh(runtime, "git remote"),
        "reflog": await sh(runtime, "git reflog --all --format=%H"),
        "objects": await sh(runtime, "git cat-file --batch-all-objects --batch"),
        "tree": await sh(runtime, "git rev-parse HEAD^{tree}"),
        "status": await sh(runtime, "git status --porcelain"),
        "fix": str((await runtime.run(["git", "cat-file", "-e", toy.fix_commit], {})).exit_code),
        "python": await sh(runtime, "command -v python"),
    }


def assert_no_future(seen: dict[str, str], box_commit: str, toy: ToyInstance) -> None:
    assert seen["commits"].split() == [box_commit]
    assert seen["refs"].split() == ["refs/heads/main"]
    assert seen["tags"] == "" and seen["remotes"] == "" and seen["status"] == ""
    assert set(seen["reflog"].split()) <= {box_commit}
    assert seen["fix"] != "0"
    assert FIX_SECRET not in seen["objects"] and "fix clamp above hi" not in seen["objects"]
    # The one commit carries exactly base_commit's tree, so the agent's diff applies to the real base.
    assert seen["tree"].strip() == git(toy.repo, "rev-parse", f"{toy.base_commit}^{{tree}}").strip()


def test_box_holds_nothing_after_base_commit(task: SWEGymTask, toy: ToyInstance) -> None:
    trace, seen = box(task, lambda runtime: inspect(runtime, toy), score=False)
    assert_no_future(seen, trace.info["swe_gym"]["box_commit"], toy)
    assert seen["python"].strip() == str(env_path(task.config.local, task.row()) / "bin" / "python")


def test_image_mode_squashes_the_images_history_and_grades(toy: ToyInstance, tmp_path: Path) -> None:
    """Image mode without a container engine: the box starts as a SWE-Gym image's /testbed does (a full clone with
    later commits, tags, branches and a remote, checked out at base_commit), and the project's python is on PATH."""
    host_bin = str(Path(sys.executable).parent)
    config = SWEGymTasksetConfig(
        data_file=write_jsonl(tmp_path / "rows.jsonl", [toy.row]),
        # no oracle is recorded for image mode here: the instance trains on its tests alone
        task={"image_env": {"PATH": f"{host_bin}:{os.environ['PATH']}"}, "test_timeout_s": 120, "replay": "if-usable"},
    )
    (image_task,) = SWEGymTaskset(config).load()
    assert image_task.data.mode == "image"

    async def like_an_image(runtime: vf.Runtime) -> None:
        await sh(
            runtime, f"git clone -q {toy.repo} . && git -c advice.detachedHead=false checkout -q {toy.base_commit}"
        )
        assert toy.fix_commit in await sh(runtime, "git rev-list --all")

    trace, seen = box(image_task, lambda runtime: inspect(runtime, toy), score=False, before=like_an_image)
    assert_no_future(seen, trace.info["swe_gym"]["box_commit"], toy)
    trace, _ = box(image_task, applying(toy.row["patch"]), before=like_an_image)
    assert trace.rewards["solved"].score == 1.0
    assert f"+    {FIX_SECRET}" in trace.info["patch"]


def test_validate_checks_gold_and_untouched(task: SWEGymTask, toy: ToyInstance) -> None:
    _, valid = box(task, task.validate, score=False)
    assert valid is True
    # a gold patch that does not apply leaves no oracle to record: with replay = "require" setup refuses the row
    wrong_gold = SWEGymTask(
        task.data.model_copy(update={"patch": toy.row["test_patch"]}),
        task.config.model_copy(update={"replay": "if-usable"}),
    )
    _, valid = box(wrong_gold, wrong_gold.validate, score=False)
    assert valid is False


def test_malformed_rows_are_reported_by_id(toy: ToyInstance, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broken = dict(toy.row, instance_id="toy__calc-8", FAIL_TO_PASS=7)
    nameless = {k: v for k, v in toy.row.items() if k != "instance_id"}
    path = write_jsonl(tmp_path / "rows.jsonl", [broken, toy.row, nameless, "{oops"])
    with caplog.at_level(logging.WARNING, logger="swe_gym.taskset"):
        tasks = SWEGymTaskset(SWEGymTasksetConfig(data_file=path, mode="local")).load()
    assert [t.data.instance_id for t in tasks] == ["toy__calc-7"]
    assert "instance 'toy__calc-8': field 'FAIL_TO_PASS': has type int" in caplog.text
    assert "row 2 (no instance_id): field 'instance_id': is missing" in caplog.text
    assert "row 3 (no instance_id): field '<row>': line 4 of" in caplog.text


def test_image_mode_names_swe_gym_images(toy: ToyInstance, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [toy.row])
    (image_task,) = SWEGymTaskset(SWEGymTasksetConfig(data_file=path, task={"replay": "if-usable"})).load()
    assert image_task.data.image == "docker.io/xingyaoww/sweb.eval.x86_64.toy_s_calc-7:latest"
    assert image_task.data.workdir == "/testbed"
    assert image_task.runtime_env()["PATH"].startswith("/opt/miniconda3/envs/testbed/bin:")


def test_environment_is_built_once_under_concurrency(toy: ToyInstance, tmp_path: Path) -> None:
    count = tmp_path / "builds.txt"
    config = LocalConfig.model_validate(
        {
            **local_task_config(tmp_path / "cache", toy.repo)["local"],
            "env": {"python": "python3", "with_pip": False, "install": [f"sleep 0.3; echo built >> {count}"]},
        }
    )
    (row,), _ = parse_rows([toy.row])
    results: list[Path] = []
    errors: list[BaseException] = []

    def prepare() -> None:
        try:
            results.append(prepare_env(config, row, prepare_snapshot(config, row)))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(set(results)) == 1 and len(results) == 4
    assert count.read_text() == "built\n"
    venv = results[0]
    assert json.loads((venv / ".ready").read_text())["reference_instance"] == "toy__calc-7"
    snapshots = list((tmp_path / "cache" / "snapshots").iterdir())
    assert [p.name for p in snapshots if not p.name.endswith(".lock")] == ["toy__calc-7"]

    # An environment interrupted mid-build (no .ready marker) is wiped and rebuilt, not used.
    (venv / ".ready").unlink()
    (venv / "junk").write_text("half-built")
    assert prepare_env(config, row, prepare_snapshot(config, row)) == venv
    assert not (venv / "junk").exists() and count.read_text() == "built\nbuilt\n"


def test_missing_base_commit_and_failing_install_are_explained(toy: ToyInstance, tmp_path: Path) -> None:
    base = local_task_config(tmp_path / "cache", toy.repo)["local"]
    (row,), _ = parse_rows([dict(toy.row, base_commit="0" * 40)])
    with pytest.raises(PrepError, match="base_commit 0{40} is not in .*repo_sources\\['toy/calc'\\]"):
        prepare_snapshot(LocalConfig.model_validate(base), row)
    (row,), _ = parse_rows([toy.row])
    failing = LocalConfig.model_validate(
        {**base, "env": {"python": "python3", "with_pip": False, "install": ["exit 3"]}}
    )
    with pytest.raises(PrepError, match="`bash -c exit 3` exited 3"):
        prepare_env(failing, row, prepare_snapshot(failing, row))
    assert not (env_path(failing, row) / ".ready").exists()
    assert (
        subprocess.run(
            ["git", "-C", str(toy.repo), "status", "--porcelain"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        == ""
    )  # exporting never touches the source clone


def test_url_source_is_mirrored_once_and_updated_for_new_commits(toy: ToyInstance, tmp_path: Path) -> None:
    config = LocalConfig.model_validate(
        {**local_task_config(tmp_path / "cache", toy.repo)["local"], "repo_sources": {"toy/calc": toy.repo.as_uri()}}
    )
    (row,), _ = parse_rows([toy.row])
    snapshot = prepare_snapshot(config, row)
    mirror = tmp_path / "cache" / "mirrors" / "toy__calc.git"
    assert git(mirror, "rev-parse", "--is-bare-repository").strip() == "true"
    assert git(snapshot, "rev-parse", "HEAD^{tree}") == git(toy.repo, "rev-parse", f"{toy.base_commit}^{{tree}}")

    # A commit the mirror has not seen yet is fetched on demand.
    (toy.repo / "NOTES.md").write_text("later\n")
    git(toy.repo, "add", "NOTES.md")
    git(toy.repo, "commit", "-q", "-m", "notes")
    later = git(toy.repo, "rev-parse", "HEAD").strip()
    try:
        (later_row,), _ = parse_rows([dict(toy.row, instance_id="toy__calc-8", base_commit=later)])
        assert (prepare_snapshot(config, later_row) / "NOTES.md").read_text() == "later\n"
    finally:
        git(toy.repo, "reset", "-q", "--hard", toy.fix_commit)


def test_a_held_preparation_lock_times_out_with_the_fix(tmp_path):
    import subprocess
    import sys

    from swe_gym.local import PrepError, exclusive

    lock = tmp_path / "env.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from filelock import FileLock; l = FileLock({str(lock)!r}); l.acquire(); "
            "print('held', flush=True); import time; time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PrepError, match="another preparation holds it. Raise local.prep_timeout_s"):
            with exclusive(lock, 0.5):
                pass
    finally:
        holder.kill()
        holder.wait(10)
    with exclusive(lock, 5.0):  # released when its holder died
        pass
