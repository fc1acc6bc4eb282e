"""Grading never raises and stays bounded, whatever the agent left in the tree or the code under test writes.

Real feature-deletion gradings (the mined shop task, `FeatureDeletionTask.grade`) on the subprocess runtime, each in
a fresh box: hypothesis builds hostile trees (folders at the held-out test paths and at canary names, long and odd
names, a path over PATH_MAX, links to `/` and loops, fifos, a huge sparse file, unreadable files, names that are not
UTF-8) and a grade always comes back. What stands where grading writes is removed first, so a tree holding only
those hazards grades as the untouched tree does (PASS_TO_PASS intact, not void); what the copy or the listing cannot
handle voids with a reason. And a candidate writing 1 GiB to its stdout and to the outcome stream's descriptor
leaves one grading process under 512 MB and voids with the cap's reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import verifiers.v1 as vf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from composer_prime.grading.canaries import WORDS
from composer_prime.process.reaper import new_token
from tests.support.featdel_repo import APPLY_DISCOUNT

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("python_on_path")]

OWNED = "owned-folder"  # a folder (holding a file) at each held-out / owned test path
CANARY = "canary-folder"  # folders at every canary name of every owned test file
OWNED_FIFO = "owned-fifo"
OWNED_LINK = "owned-link-to-root"
OWNED_READONLY = "owned-read-only"
LINKS = "links"  # a link to / and a loop
FIFO = "fifo"
LONG_NAMES = "long-names"  # 255-byte names, a name with a newline, a leading dash, two spaces
HUGE = "huge-sparse-file"
UNREADABLE = "unreadable"
DEEP = "path-over-PATH_MAX"
NOT_UTF8 = "not-utf8-name"
REMOVED_FIRST = {OWNED, CANARY, OWNED_FIFO, OWNED_LINK, OWNED_READONLY, LINKS, FIFO, LONG_NAMES, HUGE}
"""Hazards grading clears or ignores: the grade is the untouched tree's (not void, PASS_TO_PASS intact)."""
VOIDS = {DEEP, NOT_UTF8}
"""Hazards the copy or the listing cannot handle: the grade is void, with the reason."""
HAZARDS = sorted(REMOVED_FIRST | VOIDS | {UNREADABLE})


def _load(tasks_file) -> vf.Task:
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(tasks_file)}})
    return {task.data.name: task for task in load_taskset(config.taskset)}[APPLY_DISCOUNT]


def _deep(root: Path) -> None:
    """A path over PATH_MAX (4096): 24 nested 200-byte folder names, made one level at a time from its parent."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for level in range(24):
            name = f"{level:02d}" + "d" * 198
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("deep.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as out:
            out.write("x = 1\n")
    finally:
        os.close(fd)


def _plant(root: Path, hazards: list[str], owned: list[str]) -> None:
    for hazard in hazards:
        if hazard == OWNED:
            for path in owned:
                (root / path).unlink(missing_ok=True)
                (root / path).mkdir(parents=True, exist_ok=True)
                (root / path / "inner.txt").write_text("in the way\n")
        elif hazard == CANARY:
            for path in owned:
                for word in WORDS:
                    folder = root / Path(path).with_name(f"{Path(path).stem}_{word}.py")
                    folder.mkdir(parents=True, exist_ok=True)
        elif hazard == OWNED_FIFO:
            (root / owned[0]).unlink(missing_ok=True)
            (root / owned[0]).parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(root / owned[0])
        elif hazard == OWNED_LINK:
            (root / owned[-1]).unlink(missing_ok=True)
            (root / owned[-1]).parent.mkdir(parents=True, exist_ok=True)
            (root / owned[-1]).symlink_to("/")
        elif hazard == OWNED_READONLY:
            target = root / owned[0]
            if target.is_file() and not target.is_symlink():
                target.write_text("def test_forged():\n    pass\n")
                target.chmod(0o444)
        elif hazard == LINKS:
            (root / "shop" / "to_root").symlink_to("/")
            (root / "loop_a").symlink_to("loop_b")
            (root / "loop_b").symlink_to("loop_a")
        elif hazard == FIFO:
            os.mkfifo(root / "shop" / "pipe.py")
        elif hazard == LONG_NAMES:
            (root / "shop" / ("n" * 252 + ".py")).write_text("y = 2\n")
            (root / "shop" / "new\nline.py").write_text("z = 3\n")
            (root / "shop" / "-rf.py").write_text("w = 4\n")
            (root / "shop" / "two  spaces.txt").write_text("v\n")
        elif hazard == HUGE:
            with open(root / "huge.bin", "wb") as out:
                out.truncate(3 << 30)
        elif hazard == UNREADABLE:
            (root / "shop" / "secret.txt").write_text("s\n")
            (root / "shop" / "secret.txt").chmod(0)
        elif hazard == DEEP:
            _deep(root)
        elif hazard == NOT_UTF8:
            with open(os.path.join(os.fsencode(root / "shop"), b"bad\xff.py"), "w") as out:
                out.write("u = 5\n")


def grade_hostile(task: vf.Task, hazards: list[str]) -> vf.Trace:
    """Set the task up in a fresh box, plant `hazards` in its tree, and score it as verifiers does."""
    from verifiers.v1.runtimes import make_runtime

    async def run() -> vf.Trace:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"hostile-{new_token()}")
        trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name="hostile", trainable=False),
        )
        await runtime.start()
        try:
            await task.setup(runtime)
            _plant(Path(runtime.workdir), hazards, sorted(task.data.mined.test_files))
            await task.finalize(trace, runtime)
            await task.score(trace, runtime)
            return trace
        finally:
            subprocess.run(["chmod", "-R", "u+rwX", str(runtime.workdir)], check=False, capture_output=True)
            subprocess.run(["rm", "-rf", "--", str(runtime.workdir)], check=False, capture_output=True)
            await runtime.stop()

    return asyncio.run(asyncio.wait_for(run(), 180))


@pytest.fixture(scope="module")
def shop_task(tasks_file) -> vf.Task:
    return _load(tasks_file)


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(hazards=st.lists(st.sampled_from(HAZARDS), min_size=1, max_size=4, unique=True))
@example(hazards=[OWNED])  # the red team's IsADirectoryError at a held-out test path
@example(hazards=[CANARY])  # ... and at a canary name
@example(hazards=[DEEP])  # the red team's SandboxError from private_copy
@example(hazards=[OWNED_FIFO, OWNED_LINK, OWNED_READONLY, LINKS, FIFO])
@example(hazards=[NOT_UTF8, HUGE])
def test_a_grade_always_comes_back(shop_task, hazards):
    trace = grade_hostile(shop_task, hazards)
    assert "grading" in trace.info, trace.errors
    grading = trace.info["grading"]
    assert trace.reward == 0.0 and not grading["solved"]  # the feature is still deleted
    unreadable = UNREADABLE in hazards and os.geteuid() != 0  # root reads a file without permissions
    if set(hazards) & VOIDS or unreadable:
        assert grading["void"], grading
    else:
        assert grading["error"] is None and grading["void"] == [], grading
        assert trace.metrics["pass_to_pass"] == 1.0, grading["pass_to_pass_failed"]
        assert sorted(grading["fail_to_pass_failed"]) == sorted(shop_task.data.mined.fail_to_pass)


NOISY_PRICING = """
import os as _os
import stat as _stat

_CHUNK = b"x" * (1 << 20)
for _fd in range(1, 64):  # stdout, and the outcome stream's (or the replay's) private duplicate of it
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            for _ in range(1024):
                _os.write(_fd, _CHUNK)
    except OSError:
        pass
"""

ONE_GRADING = textwrap.dedent(
    """
    import asyncio, json, sys
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    tasks_file, name, noise = sys.argv[1], sys.argv[2], sys.argv[3]
    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": tasks_file}})
    task = {t.data.name: t for t in load_taskset(config.taskset)}[name]

    async def run():
        runtime = make_runtime(vf.SubprocessConfig(), name="noisy-" + name.replace("/", "-")[-20:])
        await runtime.start()
        try:
            await task.setup(runtime)
            await runtime.write("gold.patch", task.data.mined.gold_patch.encode())
            assert (await runtime.run(["git", "apply", "gold.patch"], {})).exit_code == 0
            await runtime.run(["rm", "-f", "gold.patch"], {})
            pricing = await runtime.read("shop/pricing.py")
            await runtime.write("shop/pricing.py", pricing + open(noise).read().encode())
            return await task.grade(runtime)
        finally:
            await runtime.stop()

    grade = asyncio.run(run())
    # VmHWM is this process's own high-water mark: ru_maxrss would carry the pytest parent's from before the exec
    peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"peak": peak, "void": grade.void, "solved": grade.solved, "error": grade.error}))
    """
)


def test_a_gibibyte_written_to_the_streams_stays_under_512_mb_and_voids(shop_task, tasks_file, tmp_path):
    noise = tmp_path / "noise.py"
    noise.write_text(NOISY_PRICING)
    script = tmp_path / "one_grading.py"
    script.write_text(ONE_GRADING)
    done = subprocess.run(
        [sys.executable, str(script), str(tasks_file), APPLY_DISCOUNT, str(noise)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[3],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["peak"] < 512 << 20, f"the grading process peaked at {result['peak'] >> 20} MB"
    assert not result["solved"]
    reasons = " ".join(result["void"])
    assert "the outcome stream: the run wrote" in reasons and "over the 16777216 byte cap" in reasons, result
    assert "the replay: the run wrote" in reasons, result


def test_bytecode_the_agent_left_never_stands_in_for_the_source(shop_task):
    """An unchecked-hash `.pyc` runs in place of its source whatever the source says: grading removes the tree's
    bytecode before the replay and the suite, so the code judged is the code the scan read. The gold fix, with a
    wrong implementation's bytecode beside it, scores 1.0; with the bytecode kept, the replay answers from it."""
    import py_compile

    from verifiers.v1.runtimes import make_runtime

    async def run() -> vf.Trace:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"bytecode-{new_token()}")
        trace = vf.Trace(
            task=vf.TraceTask(
                type=type(shop_task).__name__, data=shop_task.data, key=shop_task.key, hash=shop_task.hash
            ),
            agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name="bytecode", trainable=False),
        )
        await runtime.start()
        try:
            await shop_task.setup(runtime)
            root = Path(runtime.workdir)
            (root / "gold.patch").write_text(shop_task.data.mined.gold_patch)
            subprocess.run(["git", "apply", "gold.patch"], cwd=root, check=True, timeout=60)
            (root / "gold.patch").unlink()
            wrong = root / "wrong_pricing.py"
            source = (root / "shop" / "pricing.py").read_text()
            wrong.write_text(source + "\n\ndef apply_discount(*args, **kwargs):\n    return 0\n")
            tag = sys.implementation.cache_tag
            for target in (root / "shop" / "__pycache__" / f"pricing.{tag}.pyc", root / "shop" / "pricing_impl.pyc"):
                target.parent.mkdir(exist_ok=True)
                py_compile.compile(
                    str(wrong), cfile=str(target), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
                )
            wrong.unlink()
            await shop_task.finalize(trace, runtime)
            await shop_task.score(trace, runtime)
            return trace
        finally:
            await runtime.stop()

    trace = asyncio.run(asyncio.wait_for(run(), 180))
    grading = trace.info["grading"]
    assert trace.reward == 1.0 and grading["replay"] == 1.0, grading
