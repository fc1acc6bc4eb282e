"""The grading driver runs a plan's steps in order in one process, and what a step leaves behind is what it reports.

Real plans on the subprocess runtime, in a temporary folder: files written and read back, a command's output, a
launch that outlives its wait killed with its process group and reported as not returned, a failed `check` step
stopping the plan but for the clean-ups, the plan file deleted before any step runs, a dropped stream cut to its
header and trailer.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import verifiers.v1 as vf
from verifiers.v1.runtimes import subprocess as local

from composer_prime.grading.batch import Batch
from composer_prime.grading.launch import OUT_HEAD, OUT_TAIL, launch_argv, overflow


def runtime_in(folder: Path) -> vf.Runtime:
    runtime = local.SubprocessRuntime(vf.SubprocessConfig(), name="batch-test")
    runtime.workdir = folder
    return runtime


def test_steps_run_in_order_and_report(tmp_path: Path) -> None:
    batch = Batch()
    wrote = batch.write("a/b.txt", b"\x00\xffbytes")
    listed = batch.run(["sh", "-c", "cat a/b.txt | wc -c; echo err >&2"])
    read = batch.read("a/b.txt", 3)
    plan_seen = batch.run(["sh", "-c", "ls /tmp | grep -c composer-prime-plan- || true"])
    asyncio.run(batch.execute(runtime_in(tmp_path), sys.executable))
    assert wrote.exit == 0 and (tmp_path / "a" / "b.txt").read_bytes() == b"\x00\xffbytes"
    assert listed.stdout.strip() == "7" and listed.stderr.strip() == "err"
    assert read.data == b"\x00\xff" + b"b"
    assert plan_seen.reported  # the plan file is gone before the first step (another test's may be there)


def test_a_failed_check_stops_the_plan_but_the_clean_ups(tmp_path: Path) -> None:
    batch = Batch()
    batch.run(["sh", "-c", "exit 3"], check="grading: a step that fails")
    skipped = batch.write("never.txt", b"x")
    cleaned = batch.run(["touch", "cleaned"], always=True)
    with pytest.raises(vf.SandboxError, match="a step that fails failed \\(exit 3\\)"):
        asyncio.run(batch.execute(runtime_in(tmp_path), sys.executable))
    assert skipped.result == {"skipped": True} and not (tmp_path / "never.txt").exists()
    assert cleaned.exit == 0 and (tmp_path / "cleaned").exists()


def test_a_launch_past_its_wait_is_killed_and_reported(tmp_path: Path) -> None:
    """The launch's `timeout` is longer than the driver's wait here: the driver kills it and every process under it
    (`timeout` moved to a process group of its own, so the launch's group alone would spare them); the next step
    still runs."""
    batch = Batch()
    script = "sleep 300 & echo $! > grandchild; sleep 300"
    hung = batch.launch(launch_argv(False, 600, ["sh", "-c", script], cap=sys.executable), 2)
    after = batch.run(["echo", "next"])
    started = time.monotonic()
    asyncio.run(batch.execute(runtime_in(tmp_path), sys.executable))
    assert time.monotonic() - started < 60
    assert hung.result.get("timed_out") is True and hung.exit is None
    assert after.stdout.strip() == "next"
    grandchild = int((tmp_path / "grandchild").read_text())
    assert not alive(grandchild)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed and not yet reaped by whoever inherited it, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def test_a_dropped_stream_comes_back_as_its_header_and_trailer(tmp_path: Path) -> None:
    flood = f"import os\nfor _ in range({(OUT_HEAD + OUT_TAIL) // (1 << 20) + 4}): os.write(1, b'x' * (1 << 20))\n"
    batch = Batch()
    flooded = batch.launch(launch_argv(False, 60, [sys.executable, "-c", flood], cap=sys.executable), 90)
    asyncio.run(batch.execute(runtime_in(tmp_path), sys.executable))
    stdout = flooded.stdout
    assert len(stdout) < 1000 and stdout.startswith("composer-prime-launch ")
    assert overflow(stdout, "the outcome stream")  # still judged void: the trailer says what was dropped


def test_no_step_follows_a_link_the_code_under_test_left_in_the_tree(tmp_path: Path) -> None:
    """red40's R1: a suite session swapped `tests/` for a link to a host folder at exit, and the driver, outside the
    jail, wrote the late canary (a held-out test's copy) there. Writes, reads and the changed-file reads never follow
    a link: a linked folder or file in the tree is refused, and nothing lands outside it."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("host\n")
    (tree / "tests").symlink_to(outside)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "link.py").symlink_to(outside / "secret.txt")
    for path in ("tests/test_late.py", "pkg/link.py", "tests/sub/test_deep.py"):
        batch = Batch()
        batch.write(path, b"held-out expected values")
        with pytest.raises(vf.SandboxError, match=f"grading: writing {path} failed .*Error"):
            asyncio.run(batch.execute(runtime_in(tree), sys.executable))
    batch = Batch()
    read = batch.read("tests/secret.txt", 100)
    listing = batch.run(["sh", "-c", "printf 'ab  ./tests/secret.txt\\0cd  ./pkg/link.py\\0'"])
    changed = batch.changed(listing, {}, 100, 1000)
    fine = batch.write("pkg/sub/ok.py", b"ok")
    (tree / "pkg" / "hard.py").hardlink_to(outside / "secret.txt")  # a hard link: the write makes a new file
    hard = batch.write("pkg/hard.py", b"held-out")
    asyncio.run(batch.execute(runtime_in(tree), sys.executable))
    assert hard.exit == 0 and (tree / "pkg" / "hard.py").read_bytes() == b"held-out"
    assert read.exit is None and "NotADirectoryError" in read.result["error"], read.result
    assert sorted(changed.result["files"]) == ["pkg/link.py", "tests/secret.txt"]
    assert all("error" in entry for entry in changed.result["files"].values()), changed.result
    assert sorted(p.name for p in outside.rglob("*")) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host\n"
    assert fine.exit == 0 and (tree / "pkg" / "sub" / "ok.py").read_bytes() == b"ok"


def test_changed_files_past_the_scans_total_void_the_grading_with_the_total(tmp_path: Path) -> None:
    """red40's K2: 300 kept modules of 1.8 MB took the scan (in the env server's process) past the scoring timeout,
    so the rollout had no grade and no reason. Past `SCAN_TOTAL_BYTES` the grading is void, saying why."""
    from composer_prime.grading.cleaning import SCAN_BYTES, SCAN_TOTAL_BYTES, Baseline, scan_changed

    size = SCAN_BYTES - 1000
    names = [f"pkg/blob{i}.py" for i in range(SCAN_TOTAL_BYTES // size + 1)]
    (tmp_path / "pkg").mkdir()
    for name in names:
        (tmp_path / name).write_bytes(b"x = 1\n" * (size // 6))
    baseline = Baseline(files={}, content=lambda path: None)
    void = asyncio.run(scan_changed(runtime_in(tmp_path), baseline, names))
    assert len(void) == 1 and f"the {len(names)} changed files hold" in void[0] and "per grading" in void[0], void
    assert asyncio.run(scan_changed(runtime_in(tmp_path), baseline, names[:2])) == []
