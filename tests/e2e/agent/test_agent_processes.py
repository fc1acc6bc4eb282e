"""A rollout's end leaves none of its processes behind: daemons the agent started with `setsid`, `nohup`, a double
fork or a cleared environment die when the loop finishes, and when verifiers' agent timeout cancels it mid-command."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import ScriptedModelServer, tool


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where the agent's daemons write their PIDs; any still alive after the test is killed (and the test fails)."""
    path = tmp_path / "pids"
    yield path
    for pid in pids_in(path):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def daemons(pidfile: Path) -> str:
    """Four daemons, each escaping the command differently, each writing its PID."""
    return (
        f"setsid sh -c 'echo $$ >> {pidfile}; exec sleep 401' > /dev/null 2>&1 < /dev/null & "
        f"nohup sh -c 'echo $$ >> {pidfile}; exec sleep 402' > /dev/null 2>&1 & "
        f"( ( sh -c 'echo $$ >> {pidfile}; exec sleep 403' & ) & ) > /dev/null 2>&1; "
        f"( (cd / && exec setsid env -i sh -c 'echo $$ >> {pidfile}; exec sleep 404') & ) > /dev/null 2>&1 < /dev/null; "
        f"while [ $(wc -l < {pidfile}) -lt 4 ]; do sleep 0.05; done; echo started"
    )


def wait_dead(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_finished_rollout_leaves_no_process_behind(pidfile: Path) -> None:
    script = [tool("bash", command=daemons(pidfile)), tool("bash", command=f"cat {pidfile}"), tool("finish")]
    with ScriptedModelServer(script) as server:
        agent = scripted_agent(server.base_url, server.model)
        trace = asyncio.run(asyncio.wait_for(agent.run(files_task("Start daemons.", {}, {})), 120))
        requests = server.requests

    assert trace.ok, trace.errors
    # The daemons were alive across commands: the second command saw all four PIDs.
    listed = requests[2]["messages"][-1]["content"]
    pids = pids_in(pidfile)
    assert len(pids) == 4 and all(str(p) in listed for p in pids)
    assert wait_dead(pids) == []
    assert trace.info["composer_agent"]["reaped_processes"] >= 4


@pytest.mark.slow
def test_agent_timeout_mid_command_leaves_no_process_behind(pidfile: Path) -> None:
    """verifiers cancels the loop at the agent timeout while a command runs; the daemons it started die too."""
    script = [tool("bash", command=daemons(pidfile) + "; sleep 300", timeout=600), tool("finish")]
    with ScriptedModelServer(script) as server:
        agent = scripted_agent(server.base_url, server.model, timeout={"rollout": 3})
        trace = asyncio.run(asyncio.wait_for(agent.run(files_task("Start daemons.", {}, {})), 120))

    pids = pids_in(pidfile)
    assert len(pids) == 4
    assert wait_dead(pids) == []
    assert trace.stop_condition == "agent_timeout"
    info = trace.info["composer_agent"]
    assert info["finish_reason"] == "cancelled"
    assert info["reaped_processes"] >= 4
