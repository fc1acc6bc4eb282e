"""The smoke run's server processes: the policy server and both ends of the weight relay, on 127.0.0.1.

Each is a real subprocess (`python -m composer_prime.smoke.server`, `composer-prime relay origin|client`) with its
output in a log file under the run's work dir. `start` waits until it answers over HTTP (or exits, which raises
with the log's tail); `stop` ends it by its own PID (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


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


class Service:
    """One subprocess with a log file, ready once `url + ready_path` answers with a status below 500."""

    def __init__(self, name: str, argv: list[str], log: Path, url: str, ready_path: str, timeout_s: float = 120.0):
        self.name = name
        self.log_path = log
        self._log = log.open("ab")
        self.url = url
        ready_url = url + ready_path
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
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
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def policy_server(model_dir: Path, port: int, log: Path, seed: int) -> Service:
    argv = [sys.executable, "-m", "composer_prime.smoke.server", "--model-dir", str(model_dir),
            "--port", str(port), "--seed", str(seed)]  # fmt: skip
    return Service("policy server", argv, log, f"http://127.0.0.1:{port}", "/health")


def relay_origin(output_dir: Path, data_dir: Path, port: int, log: Path) -> Service:
    argv = [sys.executable, "-m", "composer_prime", "relay", "origin", "--output-dir", str(output_dir),
            "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port), "--poll-interval-s", "0.1"]  # fmt: skip
    return Service("relay origin", argv, log, f"http://127.0.0.1:{port}", "/distribution.txt")


def relay_client(origin_url: str, upstream: str, store_dir: Path, port: int, log: Path) -> Service:
    argv = [sys.executable, "-m", "composer_prime", "relay", "client", "--servers", origin_url, "--upstream", upstream,
            "--store-dir", str(store_dir), "--host", "127.0.0.1", "--port", str(port),
            "--wait-for-version-s", "120"]  # fmt: skip
    return Service("relay client", argv, log, f"http://127.0.0.1:{port}", "/health")
