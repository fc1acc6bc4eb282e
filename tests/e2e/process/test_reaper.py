"""The process reaper against real processes on the subprocess runtime: daemons that left the box by every usual
route die; the reaper itself, its caller, other boxes' processes and unrelated processes live."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

from composer_prime.process.reaper import BOX_VAR, box_argv, box_env, new_token, reap_box


def alive(pid: int) -> bool:
    """A process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def read_pids(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []


def wait_pids(pidfile: Path, count: int, timeout_s: float = 10.0) -> list[int]:
    """The PIDs the box's processes wrote, once `count` of them are there."""
    deadline = time.monotonic() + timeout_s
    while len(pids := read_pids(pidfile)) < count:
        assert time.monotonic() < deadline, f"only {pids} of {count} pids were written"
        time.sleep(0.05)
    return pids


def wait_dead(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where the box's processes write their PIDs; whatever is listed there is killed after the test, pass or fail
    (three passes, for a loop that was still spawning)."""
    path = tmp_path / "pids"
    yield path
    for _ in range(3):
        for pid in read_pids(path):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


async def started() -> SubprocessRuntime:
    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    return runtime


async def run_and_reap(command: str, pidfile: Path, count: int = 1) -> tuple[int, list[int]]:
    """Run `command` as a box process (box_argv), wait for `count` PIDs, reap; (killed, PIDs written)."""
    runtime = await started()
    token = new_token()
    try:
        result = await runtime.run(box_argv(["bash", "-c", command], token), {"PIDS": str(pidfile)})
        assert result.exit_code == 0, result
        pids = wait_pids(pidfile, count)
        assert all(alive(p) for p in pids[:count]), "the command did not leave its processes running"
        return await reap_box(runtime, str(runtime.workdir), token), read_pids(pidfile)
    finally:
        await runtime.stop()


# Each leaves a process running, writes its PID to $PIDS (outside the box) and returns at once. Their output goes
# to /dev/null so that `runtime.run` (which reads the command's pipes to EOF) returns.
ESCAPES = {
    "background": "sleep 301 >/dev/null 2>&1 & echo $! >> $PIDS",
    "nohup": "nohup sh -c 'echo $$ >> $PIDS; exec sleep 302' >/dev/null 2>&1 &",
    "setsid": "setsid sh -c 'echo $$ >> $PIDS; exec sleep 303' >/dev/null 2>&1 < /dev/null &",
    "double_fork": "( ( sh -c 'echo $$ >> $PIDS; exec sleep 304' & ) & ) >/dev/null 2>&1",
    # Orphaned, own session, no variable, working directory outside the box: only the limit tag is left.
    "env_i_cd_root_setsid": (
        "( (cd / && exec setsid env -i PIDS=$PIDS sh -c 'echo $$ >> $PIDS; exec sleep 305') & ) "
        ">/dev/null 2>&1 < /dev/null"
    ),
    # The same, re-exec'd under other names.
    "reexec": (
        "(cd /tmp && exec -a innocent env -i bash -c 'echo $$ >> '$PIDS'; exec -a kworker sleep 306' &) >/dev/null 2>&1"
    ),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_reaper_kills_processes_that_left_the_box(pidfile: Path, name: str) -> None:
    killed, pids = asyncio.run(run_and_reap(ESCAPES[name], pidfile))
    assert wait_dead(pids) == [], f"{name}: processes outlived the reaper"
    assert killed >= 1


def test_reaper_kills_an_untagged_child_of_a_box_process(pidfile: Path) -> None:
    """A child that drops every tag of its own (no variable, limit lowered, cd /) is the box's through its parent."""
    command = (
        "( env -i PIDS=$PIDS bash -c 'cd / && ulimit -R 7 && echo $$ >> $PIDS && exec sleep 307'; sleep 308 ) "
        ">/dev/null 2>&1 < /dev/null &"
    )

    async def go() -> list[int]:
        runtime = await started()
        token = new_token()
        try:
            await runtime.run(box_argv(["bash", "-c", command], token), {"PIDS": str(pidfile)})
            pids = wait_pids(pidfile, 1)
            assert token not in Path(f"/proc/{pids[0]}/limits").read_text()
            assert BOX_VAR not in Path(f"/proc/{pids[0]}/environ").read_text()
            await reap_box(runtime, str(runtime.workdir), token)
            return pids
        finally:
            await runtime.stop()

    assert wait_dead(asyncio.run(go())) == []


def test_reaper_kills_processes_tagged_only_by_the_variable_or_the_directory(pidfile: Path) -> None:
    """Started without box_argv: one with the box's variable in its env that left the directory and was orphaned,
    one with no tag that stayed in the box's directory (e.g. a grader's plain runtime.run)."""
    by_var = "( (cd / && exec setsid sh -c 'echo $$ >> $PIDS; exec sleep 309') & ) >/dev/null 2>&1 < /dev/null"
    by_dir = "setsid sh -c 'echo $$ >> $PIDS; exec sleep 310' >/dev/null 2>&1 < /dev/null &"

    async def go() -> tuple[int, list[int]]:
        runtime = await started()
        token = new_token()
        try:
            await runtime.run(["bash", "-c", by_var], {"PIDS": str(pidfile), **box_env(token)})
            await runtime.run(["bash", "-c", by_dir], {"PIDS": str(pidfile)})
            pids = wait_pids(pidfile, 2)  # in either order: both children write in the background
            assert Path("/") in {Path(f"/proc/{pid}/cwd").readlink() for pid in pids}
            return await reap_box(runtime, str(runtime.workdir), token), pids
        finally:
            await runtime.stop()

    killed, pids = asyncio.run(go())
    assert wait_dead(pids) == [] and killed == 2


def _sleeping(pid: int, seconds: str) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", seconds.encode()]
    except OSError:
        return False


def test_reaper_without_the_directory_test_spares_untagged_processes_in_the_box(pidfile: Path) -> None:
    """`by_workdir=False`: a service started in the box without box_argv (a task's, verifiers' tool server) lives;
    the box's tagged daemon dies."""
    service = "setsid sh -c 'echo $$ >> $PIDS; exec sleep 316' >/dev/null 2>&1 < /dev/null &"

    async def go() -> tuple[int, list[int]]:
        runtime = await started()
        token = new_token()
        try:
            await runtime.run(["bash", "-c", service], {"PIDS": str(pidfile)})
            await runtime.run(box_argv(["bash", "-c", service.replace("316", "317")], token), {"PIDS": str(pidfile)})
            pids = wait_pids(pidfile, 2)
            return await reap_box(runtime, str(runtime.workdir), token, by_workdir=False), pids
        finally:
            await runtime.stop()

    killed, pids = asyncio.run(go())
    # the two children write their pids in the background, in either order: tell them apart by what they run
    service_pid = next(pid for pid in pids if _sleeping(pid, "316"))
    daemon_pid = next(pid for pid in pids if pid != service_pid)
    assert killed == 1 and wait_dead([daemon_pid]) == [] and alive(service_pid)


def test_reaper_outlasts_a_process_that_keeps_forking(pidfile: Path) -> None:
    """A loop that detaches a new sleeper every 10 ms: round after round, the reaper ends the loop and every
    sleeper."""
    command = (
        "setsid bash -c 'echo $$ >> $PIDS; while :; do (setsid sleep 311 & echo $! >> $PIDS); sleep 0.01; done' "
        ">/dev/null 2>&1 < /dev/null &"
    )
    _, pids = asyncio.run(run_and_reap(command, pidfile, count=10))
    time.sleep(0.3)  # a surviving loop would keep appending
    assert wait_dead(sorted(set(pids) | set(read_pids(pidfile)))) == []


def test_reaper_spares_other_boxes_and_unrelated_processes(tmp_path: Path, pidfile: Path) -> None:
    """Another box's daemon (its own token and work directory) and a plain host process live on."""
    theirs = tmp_path / "theirs"
    daemon = "setsid sh -c 'echo $$ >> $PIDS; exec sleep 312' >/dev/null 2>&1 < /dev/null &"

    async def go() -> None:
        a, b = await started(), await started()
        ta, tb = new_token(), new_token()
        bystander = await asyncio.create_subprocess_exec("sleep", "313", cwd=str(tmp_path))
        try:
            await a.run(box_argv(["bash", "-c", daemon], ta), {"PIDS": str(pidfile), **box_env(ta)})
            await b.run(box_argv(["bash", "-c", daemon], tb), {"PIDS": str(theirs), **box_env(tb)})
            mine, other = wait_pids(pidfile, 1), wait_pids(theirs, 1)
            assert await reap_box(a, str(a.workdir), ta) == 1
            assert wait_dead(mine) == []
            assert alive(other[0]) and alive(bystander.pid)
            assert await reap_box(b, str(b.workdir), tb) == 1
            assert wait_dead(other) == []
        finally:
            bystander.kill()
            await bystander.wait()
            await a.stop()
            await b.stop()

    asyncio.run(go())


@pytest.mark.slow
def test_reaper_spares_itself_and_a_caller_working_in_the_box(pidfile: Path) -> None:
    """The caller runs in the box's work directory with the box's variable, and the runtime passes the variable to
    every process (a taskset that sets it runtime-wide): the reaper kills the daemon, not itself, not its caller."""
    caller = (
        "import asyncio, sys\n"
        "from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime\n"
        "from composer_prime.process.reaper import box_env, reap_box\n"
        "async def main():\n"
        "    runtime = SubprocessRuntime(SubprocessConfig())\n"
        "    runtime.workdir, runtime.env = sys.argv[1], box_env(sys.argv[2])\n"
        "    print('killed', await reap_box(runtime, sys.argv[1], sys.argv[2]))\n"
        "asyncio.run(main())\n"
    )
    daemon = "setsid sh -c 'echo $$ >> $PIDS; exec sleep 314' >/dev/null 2>&1 < /dev/null &"

    async def go() -> tuple[str, list[int]]:
        runtime = await started()
        token = new_token()
        try:
            await runtime.run(box_argv(["bash", "-c", daemon], token), {"PIDS": str(pidfile)})
            pids = wait_pids(pidfile, 1)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                caller,
                str(runtime.workdir),
                token,
                cwd=str(runtime.workdir),
                env={**os.environ, **box_env(token)},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, out.decode()
            return out.decode(), pids
        finally:
            await runtime.stop()

    out, pids = asyncio.run(go())
    assert out.strip() == "killed 1" and wait_dead(pids) == []


def test_what_the_reaper_does_not_guarantee(pidfile: Path) -> None:
    """The documented escape: a process that lowers its limit, clears its environment, leaves the work directory and
    is orphaned, all on purpose, is not found (the fixture kills it)."""
    command = (
        "( (cd / && ulimit -R 9 && exec setsid env -i PIDS=$PIDS sh -c 'echo $$ >> $PIDS; exec sleep 315') & ) "
        ">/dev/null 2>&1 < /dev/null"
    )
    killed, pids = asyncio.run(run_and_reap(command, pidfile))
    assert killed == 0 and alive(pids[0])


def test_reaper_refuses_bad_tokens_and_work_directories() -> None:
    async def go() -> None:
        runtime = await started()
        try:
            with pytest.raises(ValueError, match="not a reaper token"):
                await reap_box(runtime, str(runtime.workdir), "12; rm -rf /")
            with pytest.raises(ValueError, match="below '/'"):
                await reap_box(runtime, "/", new_token())
            with pytest.raises(ValueError, match="not an absolute"):
                await reap_box(runtime, "work", new_token())
        finally:
            await runtime.stop()

    asyncio.run(go())
    with pytest.raises(ValueError, match="not a reaper token"):
        box_argv(["true"], "5")
