"""The grading launcher on the subprocess runtime: the replay runs as PID 1 of a namespace of its own, so a daemon the
candidate's code starts during the replay dies with it (no reap needed), and the launcher's header cannot be forged
by what the launched program prints."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys

import verifiers.v1 as vf

from composer_prime.grading import behaviour
from composer_prime.grading.launch import jailed, launch_argv, marks
from composer_prime.process.reaper import new_token

DAEMON = '''\
import subprocess


def double(x):
    """Doubles `x`, and leaves a detached daemon behind that would outlive the call."""
    subprocess.Popen(["setsid", "sleep", "{seconds}"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 2 * x
'''


def _alive(mark: str) -> list[int]:
    """PIDs (as the host sees them) of live processes whose command line holds `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def _namespaces_allowed() -> bool:
    argv = launch_argv(False, 10, ["true"], own_pids=True)
    return marks(subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout)[1]


def test_a_daemon_started_during_the_replay_dies_with_it() -> None:
    if not _namespaces_allowed():
        import pytest

        pytest.skip("this host refuses `unshare --pid` (and `unshare -r --pid`): the reaper ends the replay instead")
    seconds = f"97.{secrets.randbelow(10**6):06d}"  # the daemon's mark, unique to this run
    call = behaviour.RecordedCall(
        target="feat:double", args=[["int", "21"]], result=["int", "42"], args_after=[["int", "21"]]
    )
    from verifiers.v1.runtimes import make_runtime

    async def run() -> tuple[list, bool]:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"launch-{new_token()}")
        await runtime.start()
        try:
            await runtime.write("feat.py", DAEMON.format(seconds=seconds).encode())
            answers, _, contained = await behaviour.replay(
                runtime, [call], str(runtime.workdir), sys.executable, ["."], 60
            )
            return answers, contained
        finally:
            await runtime.stop()

    try:
        answers, contained = asyncio.run(asyncio.wait_for(run(), 120))
        assert behaviour.compare([call], answers) == (1.0, []), answers
        assert contained, "the replay should have run in a PID namespace of its own"
        assert _alive(seconds) == [], "the daemon the replayed call started outlived the replay"
    finally:
        for pid in _alive(seconds):  # only if the test failed: stop the daemon it caused
            os.kill(pid, 9)


def test_the_launch_header_is_the_launchers_not_the_programs() -> None:
    forged = "composer-prime-launch network=isolated pids=own jail=on"
    argv = launch_argv(False, 10, ["sh", "-c", f"echo '{forged}'"], own_pids=False)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
    assert out.splitlines() == ["composer-prime-launch network=shared pids=shared jail=off", forged]
    assert marks(out) == (False, False) and not jailed(out)
    assert marks(forged + "\n") == (True, True) and jailed(forged)  # the same line first, as the launcher prints it
    assert marks("") == (False, False) and marks("composer-prime-launch pids=own\n") == (False, False)
