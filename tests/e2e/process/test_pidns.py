"""The rollout's PID namespace against real processes on the subprocess runtime: a daemon that shed every reaper tag
outlives the reaper but not the namespace's end; a refusal says why; a PID that is no longer the holder is spared."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

from composer_prime.process.pidns import Namespace, close_namespace, enter_argv, open_namespace
from composer_prime.process.reaper import box_argv, new_token, reap_box

pytestmark = pytest.mark.slow

ALLOWED = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode == 0
needs_pidns = pytest.mark.skipif(not ALLOWED, reason="this machine refuses `unshare --pid` (no CAP_SYS_ADMIN)")


def marked(mark: str) -> list[int]:
    """Live host PIDs whose command line holds `mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark.encode() in (proc / "cmdline").read_bytes():
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                found += [int(proc.name)] if state not in ("Z", "X") else []
        except OSError:
            continue
    return found


def wait_for(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def started(env: dict[str, str] | None = None) -> SubprocessRuntime:
    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    runtime.env = {**runtime.env, **(env or {})}
    return runtime


@needs_pidns
def test_namespace_end_kills_the_daemon_the_reaper_misses() -> None:
    mark = f"composer-pidns-test-{secrets.token_hex(4)}"
    # rlimit lowered, directory left, environment cleared, new session, orphaned: no tag of the reaper's is left
    shed = (
        f"( ulimit -R 4; cd / && exec setsid env -i bash -c 'exec -a {mark} sleep 300' </dev/null >/dev/null 2>&1 & )"
    )

    async def scenario() -> tuple[int, int, list[int], str]:
        runtime = await started()
        namespace = await open_namespace(runtime)
        assert isinstance(namespace, Namespace), namespace
        token = new_token()
        result = await runtime.run(enter_argv(box_argv(["bash", "-c", shed], token), namespace.holder), {})
        assert result.exit_code == 0, result.stderr
        seen: list[str] = []

        def settled() -> bool:  # the marked process is `env`, then `bash`, then `sleep` (one pid, three execs): read
            for pid in marked(mark):  # its namespace once it is the sleeper, in the same look that found it
                try:
                    if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == mark.encode():
                        seen.append(os.readlink(f"/proc/{pid}/ns/pid"))
                except OSError:
                    continue
            return bool(seen)

        assert wait_for(settled)
        inside = seen[0]
        reaped = await reap_box(runtime, str(runtime.workdir), token)
        survivors = marked(mark)
        killed = await close_namespace(runtime, namespace)
        return reaped, killed, survivors, inside if inside != namespace.inode else ""

    try:
        reaped, killed, survivors, wrong_ns = asyncio.run(scenario())
        assert not wrong_ns, f"the daemon ran in {wrong_ns}, not the rollout's namespace"
        assert reaped == 0 and survivors, "the reaper alone must miss this daemon (else the test proves nothing)"
        assert killed >= 2 and marked(mark) == []  # the holder and the daemon
    finally:
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)


def test_refusal_names_the_reason(tmp_path: Path) -> None:
    """A box without `unshare`: no namespace, and a sentence saying why (recorded on the grade)."""
    for program in ("bash", "head"):
        (tmp_path / program).symlink_to(subprocess.check_output(["which", program], text=True).strip())

    async def scenario() -> Namespace | str:
        return await open_namespace(await started({"PATH": str(tmp_path)}))

    assert asyncio.run(scenario()) == "unshare is not installed in the box"


def test_close_spares_a_pid_that_is_not_the_holder() -> None:
    """A holder that died early leaves its PID free for reuse: closing checks the namespace's identity first."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:

        async def scenario() -> int:
            return await close_namespace(await started(), Namespace(str(bystander.pid), "pid:[1]"))

        assert asyncio.run(scenario()) == 0
        assert bystander.poll() is None, "a process outside the namespace was killed"
    finally:
        bystander.kill()
        bystander.wait()


@needs_pidns
def test_namespace_ends_with_the_box_folder() -> None:
    """A rollout that is never graded: removing its work directory ends the namespace and every member."""
    mark = f"composer-pidns-test-{secrets.token_hex(4)}"

    async def scenario() -> Namespace:
        runtime = await started()
        namespace = await open_namespace(runtime)
        assert isinstance(namespace, Namespace), namespace
        await runtime.run(
            enter_argv(
                ["bash", "-c", f"(setsid bash -c 'exec -a {mark} sleep 300' </dev/null >/dev/null 2>&1 &)"],
                namespace.holder,
            ),
            {},
        )
        assert wait_for(lambda: bool(marked(mark)))
        await runtime.stop()  # removes the work directory
        return namespace

    try:
        namespace = asyncio.run(scenario())
        assert wait_for(lambda: not marked(mark) and not Path(f"/proc/{namespace.holder}/ns").exists(), 10.0)
    finally:
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)
