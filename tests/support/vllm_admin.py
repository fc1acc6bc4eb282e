"""A stand-in for the admin side of PRIME-RL's vLLM server, on 127.0.0.1, recording what it is asked to do.

On `POST /update_weights {"weight_dir": ...}` it reads every file of that directory at call time and records their
blake3 digests, which is what a real loader would have seen. `/pause`, `/resume`, `/health` and `/v1/models` answer
like PRIME-RL's server does.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import blake3


@dataclass
class Call:
    method: str
    path: str
    body: dict | None
    headers: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # update_weights: file name -> blake3 at call time


def dir_digests(path: Path) -> dict[str, str]:
    """blake3 of every checkpoint file in a step dir (PRIME-RL's empty marker files and dot-files left out)."""
    return {
        p.name: blake3.blake3(p.read_bytes()).hexdigest()
        for p in sorted(path.iterdir())
        if p.is_file() and p.name not in ("STABLE", "NCCL_READY") and not p.name.startswith(".")
    }


class AdminStandIn:
    def __init__(self, model: str = "tiny-lm"):
        self.model = model
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                stand_in._record(Call("GET", self.path, None, dict(self.headers.items())))
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": stand_in.model, "object": "model"}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                call = Call("POST", self.path, body, dict(self.headers.items()))
                route = self.path.split("?", 1)[0]
                if route == "/update_weights":
                    weight_dir = Path(body["weight_dir"])
                    if not weight_dir.is_dir():
                        stand_in._record(call)
                        self._send(500, {"detail": f"no such directory {weight_dir}"})
                        return
                    call.files = dir_digests(weight_dir)
                    stand_in._record(call)
                    self._send(200, {"status": "ok"})
                elif route in ("/pause", "/resume"):
                    stand_in._record(call)
                    self._send(200, {"status": "paused" if route == "/pause" else "resumed"})
                else:
                    stand_in._record(call)
                    self._send(404, {"detail": "Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def updates(self) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.path.split("?", 1)[0] == "/update_weights"]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
