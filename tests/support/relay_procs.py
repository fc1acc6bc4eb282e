"""Run `composer-prime relay origin|client` as real subprocesses on 127.0.0.1, plus a tap between them.

The tap is a pass-through HTTP server in front of the origin that logs every path it serves and can damage chosen
responses (flip a byte, cut one short), rewrite them (a man in the middle), hide versions, or slow shards down like a
thin WAN link; its upstream can be switched (an attacker taking over the origin's address).

Origins sign with, and clients trust, the key pair in the folder above their data / store dir (`relay_pki`); clients
take `ADMIN_TOKEN`, which `http` sends unless told otherwise (`token=None` sends none).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

from composer_prime.process.children import Service
from composer_prime.process.ports import free_port
from tests.support.relay_pki import ADMIN_TOKEN, RUN_ID, admin_token_file, signing_keys

REPO = Path(__file__).resolve().parents[2]


def http(
    method: str, url: str, body: bytes | dict | None = None, timeout: float = 60.0, token: str | None = ADMIN_TOKEN
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class RelayProcess(Service):
    """One `composer-prime relay` subprocess (the smoke run's service wrapper); stopped by its own PID on exit."""

    def __init__(self, args: list[str], log: Path, url: str, ready_path: str):
        super().__init__("relay", [sys.executable, "-m", "composer_prime", "relay", *args], log, url, ready_path, 30.0)

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"relay exited with {self.proc.returncode}:\n{self.log()}")
        return True

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_origin(output_dir: Path, data_dir: Path, log: Path, **options) -> tuple[RelayProcess, str]:
    port = free_port()
    private, _ = signing_keys(data_dir.parent / "keys")
    args = [
        "origin",
        "--output-dir",
        str(output_dir),
        "--data-dir",
        str(data_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--poll-interval-s",
        "0.1",
        "--signing-key-file",
        str(private),
        "--run-id",
        RUN_ID,
    ]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    url = f"http://127.0.0.1:{port}"
    return RelayProcess(args, log, url, "/data1.bin"), url


def start_client(
    servers: str, upstream: str, store_dir: Path, log: Path, *flags: str, **options
) -> tuple[RelayProcess, str]:
    port = free_port()
    _, public = signing_keys(store_dir.parent / "keys")
    args = [
        "client",
        "--servers",
        servers,
        "--upstream",
        upstream,
        "--store-dir",
        str(store_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--verify-key-file",
        str(public),
        "--run-id",
        RUN_ID,
        "--admin-token-file",
        str(admin_token_file(store_dir.parent / "keys")),
        *flags,
    ]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    url = f"http://127.0.0.1:{port}"
    return RelayProcess(args, log, url, "/health"), url


class Tap:
    """Pass-through relay in front of `upstream` that records and can damage, hide or slow what it serves."""

    def __init__(self, upstream: str):
        self.upstream = upstream
        self.served: list[str] = []
        self.damage: dict[str, list[str]] = {}  # path -> actions for its next responses: "flip", "truncate"
        self.rewrite: dict[str, Callable[[bytes], bytes]] = {}  # path -> what a man in the middle serves instead
        self.encoding: dict[str, str] = {}  # path -> the Content-Encoding header it is served with
        self.hidden_versions: set[int] = set()
        self.shard_delay_s = 0.0
        self._lock = threading.Lock()
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.lstrip("/")
                version = path.split("/", 1)[0]
                if version[1:].isdigit() and int(version[1:]) in tap.hidden_versions:
                    self.send_error(404)
                    return
                try:
                    with urllib.request.urlopen(f"{tap.upstream}/{path}", timeout=30) as response:
                        data = response.read()
                except urllib.error.HTTPError as err:
                    self.send_error(err.code)
                    return
                if path == "distribution.txt":
                    lines = data.decode().splitlines(keepends=True)
                    kept = [line for line in lines if int(line.split(":")[0][1:]) not in tap.hidden_versions]
                    data = "".join(kept).encode()
                with tap._lock:
                    tap.served.append(path)
                    actions = tap.damage.get(path, [])
                    action = actions.pop(0) if actions else None
                if path.endswith(".bin") and "/" in path:
                    time.sleep(tap.shard_delay_s)
                if path in tap.rewrite:
                    data = tap.rewrite[path](data)
                if action == "flip":
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                elif action == "truncate":
                    data = data[: len(data) // 2]
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                if path in tap.encoding:
                    self.send_header("Content-Encoding", tap.encoding[path])
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def count(self, path: str) -> int:
        with self._lock:
            return self.served.count(path)

    def shards_served(self, version: int) -> list[str]:
        with self._lock:
            return [p for p in self.served if p.startswith(f"v{version}/")]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
