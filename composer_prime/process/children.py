"""Child processes that cannot outlive their parent: `spawn`, `stop_group`, `descendants`, and `Service` (a server
on 127.0.0.1).

Whatever runs PRIME-RL's processes here starts every child through `spawn` (`group.py`); the corpus miner starts its
workers with it; the vLLM server tests, the relay tests and the prefix-cache bench start servers as `Service`s
(`python -m tests.support.vllm_server`, `composer-prime relay ...`). Each child leads a session of its own; a
`Service` is ready once it answers over HTTP (or raises with its log's tail if it exits); `stop_group` ends a child by
its own PID (SIGTERM, then SIGKILL to its process group and every process below it after a grace period, which also
ends vLLM's engine process). On Linux the kernel also sends each one SIGTERM when this process dies
(PR_SET_PDEATHSIG), from whichever thread it was started: every child is forked from one long-lived thread, because
the kernel ties that signal to the forking thread, not the process.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class ServiceError(RuntimeError):
    """A service did not come up."""


def _die_with_parent() -> Any:
    """On Linux, a function for `preexec_fn` that has the kernel send the child SIGTERM when the thread that forked
    it ends, even by SIGKILL of the process (a timed-out test, a killed terminal): no server outlives its run. The
    kernel ties PR_SET_PDEATHSIG to the forking *thread*, not the process, so `spawn` forks every child from one
    thread that lives as long as the process. A parent gone before `prctl` ran (no signal would come) is checked
    with `getppid` right after."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def arm() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class _Forker:
    """The one thread every service is forked from, started on first use, a daemon that lives until the process
    exits: a child's death signal fires when the process ends, not when the (possibly short-lived) thread that asked
    for the child ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Any, concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            call, future = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as e:  # noqa: BLE001 - handed to the caller, who re-raises it
                    future.set_exception(e)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="composer-children-forker", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return subprocess.Popen(argv, **kwargs)
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._jobs.put((lambda: subprocess.Popen(argv, **kwargs), future))
        return future.result()


_FORKER = _Forker()


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **kwargs)` in a session of its own, killed (SIGTERM) by the kernel when this process
    dies, whichever thread calls it."""
    return _FORKER.popen(argv, start_new_session=True, preexec_fn=_die_with_parent(), **kwargs)


class Service:
    """One subprocess with a log file, ready once `url + ready_path` answers with a status below 500."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        url: str,
        ready_path: str,
        timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self.log_path = log
        self._log = log.open("ab")
        self.url = url
        ready_url = url + ready_path
        self.proc = spawn(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise ServiceError(f"{name} exited with code {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2):
                    return
            except urllib.error.HTTPError as err:
                if err.code < 500:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"{name} did not answer at {ready_url} within {timeout_s:.0f}s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        stop_group(self.proc, grace_s=30.0)
        self._log.close()


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (Linux: parent links read from /proc), whatever session or group it made for
    itself: torch elastic starts its ranks in new sessions, sandboxes their keepers."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """End `proc`, a session leader from `spawn`, its process group and every process below it: SIGTERM to it, then
    after `grace_s` SIGKILL to its group and to all its descendants seen before or after the SIGTERM (vLLM's engine
    core, torchrun's ranks in their own sessions, a sandbox keeper that ignores SIGTERM)."""
    below = descendants(proc.pid) if sys.platform == "linux" else set()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            below |= descendants(proc.pid) if sys.platform == "linux" else set()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(timeout=10)
