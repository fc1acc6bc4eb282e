"""The inference-side admin proxy: PRIME-RL's `admin_base_url` for a remote vLLM server.

PRIME-RL's orchestrator drives weight updates through admin endpoints (`POST /pause`, `POST /update_weights
{"weight_dir": "<output_dir>/broadcasts/step_N"}`, `POST /resume`, `GET /health`, `GET /v1/models`). That path is
on the trainer host. The proxy takes `step_N` from it, makes sure the step is materialised locally (`Fetcher`), and
forwards the call to the real admin endpoint with `weight_dir` rewritten to the local copy. `POST /load_lora_adapter`
(`lora_path`) is handled the same way. Every other request passes through unchanged, headers included.

Status codes follow what PRIME-RL's admin client retries: 4xx for requests that will never work (bad JSON, a path
that is not a broadcast step dir: not retried), 502 when the relay cannot provide the step, 504 when the step was not
published in time (both retried by PRIME-RL within its budget).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.broadcast.checkpoint import DecodeError
from composer_prime.broadcast.client import ClientConfig, Fetcher, RelayError
from composer_prime.broadcast.manifest import ManifestError
from composer_prime.broadcast.protocol import ProtocolError

logger = logging.getLogger("composer_prime.relay.proxy")
_STEP = re.compile(r"^step_(\d+)$")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length",
               "proxy-authorization", "proxy-authenticate"}  # fmt: skip
# POST path -> JSON field naming a broadcast step directory.
REWRITES = {"/update_weights": "weight_dir", "/load_lora_adapter": "lora_path"}


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(pattern=r"^https?://")
    """The real vLLM admin base URL on this host, e.g. `http://127.0.0.1:8000` (no `/v1`)."""
    host: str = "0.0.0.0"
    """Address the proxy binds; PRIME-RL's `admin_base_url` points here."""
    port: int = Field(8100, ge=0, le=65535)
    """Proxy port (0 picks a free one)."""
    upstream_timeout_s: float = Field(720.0, gt=0)
    """Timeout of a forwarded call (PRIME-RL allows 720 s for `/update_weights`)."""
    max_body_bytes: int = Field(1 << 20, ge=1024)
    """Largest request body accepted."""
    prefetch: bool = True
    """Build each newly listed step in the background, so `/update_weights` usually finds it ready."""


class RelayClientConfig(ClientConfig, ProxyConfig):
    """`composer-prime relay client`: where to fetch versions from (the fetcher) and what to serve (the proxy)."""


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def step_of(path_value: object, field: str, route: str) -> int:
    """The N of a `.../step_N` path in a request body, or a 400 naming the field and the fix."""
    if not isinstance(path_value, str) or not path_value:
        raise HttpError(400, f"POST {route} needs a JSON object with a non-empty string {field!r}, got {path_value!r}")
    match = _STEP.match(PurePosixPath(path_value.rstrip("/")).name)
    if match is None:
        raise HttpError(
            400,
            f"{field}={path_value!r} is not a PRIME-RL broadcast step dir; the relay serves "
            "'<output_dir>/broadcasts/step_<N>' paths written by the filesystem weight broadcast",
        )
    return int(match[1])


class _Handler(BaseHTTPRequestHandler):
    server_version = "composer-prime-relay"
    default_request_version = "HTTP/1.0"  # errors on unparseable request lines still get a status line
    proxy: Proxy  # set on the subclass built by Proxy.serve

    def log_message(self, format, *args):
        logger.debug("%s %s", self.address_string(), format % args)

    def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(status)
        for key, value in headers or [("Content-Type", "application/json")]:
            if key.lower() not in _HOP_BY_HOP and key.lower() not in ("server", "date"):  # send_response adds these
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        logger.warning(f"{self.command} {self.path} -> {status}: {message}")
        self._reply(status, json.dumps({"error": message}).encode())

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise HttpError(411, "chunked request bodies are not accepted; send Content-Length")
        raw = self.headers.get("Content-Length", "0") or "0"
        if not raw.strip().isdigit():
            raise HttpError(400, f"Content-Length {raw!r} is not a non-negative integer")
        length = int(raw)
        if length > self.proxy.config.max_body_bytes:
            if length <= 64 * self.proxy.config.max_body_bytes:  # drain, so the client reads the reply, not EPIPE
                remaining = length
                while remaining > 0 and (piece := self.rfile.read(min(1 << 16, remaining))):
                    remaining -= len(piece)
            raise HttpError(413, f"body of {length} bytes exceeds max_body_bytes={self.proxy.config.max_body_bytes}")
        body = self.rfile.read(length)
        if len(body) != length:
            raise HttpError(400, f"body ended after {len(body)} of {length} bytes")
        return body

    def _handle(self) -> None:
        self.close_connection = True
        try:
            body = self._body()
            route = self.path.split("?", 1)[0]
            pinned = None
            if self.command == "POST" and route in REWRITES:
                body, pinned = self._materialise(route, body)
            try:
                self._forward(body)
            finally:
                if pinned is not None:
                    self.proxy.fetcher.release(pinned)
        except HttpError as err:
            self._error(err.status, str(err))
        except Exception as err:  # a bug must not kill the server thread silently
            logger.exception("proxy failure")
            self._error(500, f"{type(err).__name__}: {err}")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle

    def _materialise(self, route: str, body: bytes) -> tuple[bytes, int | None]:
        """The body to forward, and the step pinned for vLLM to read (release it after forwarding)."""
        field = REWRITES[route]
        try:
            payload = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError) as err:
            raise HttpError(400, f"POST {route} body is not JSON: {err}") from err
        if not isinstance(payload, dict):
            raise HttpError(400, f"POST {route} needs a JSON object with {field!r}, got {type(payload).__name__}")
        if route == "/update_weights" and payload.get(field) is None:
            return body, None  # no directory to relay (e.g. an NCCL broadcast): vLLM gets the call as sent
        step = step_of(payload.get(field), field, route)
        try:
            local = self.proxy.fetcher.ensure_step(step, pin=True)
        except TimeoutError as err:
            raise HttpError(504, str(err)) from err
        except (RelayError, DecodeError, ManifestError, ProtocolError) as err:
            raise HttpError(502, f"cannot materialise step {step}: {err}") from err
        payload[field] = local.as_posix()
        return json.dumps(payload).encode(), step

    def _forward(self, body: bytes) -> None:
        url = self.proxy.config.upstream.rstrip("/") + self.path
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        request = urllib.request.Request(url, data=body if body else None, headers=headers, method=self.command)
        try:
            with urllib.request.urlopen(request, timeout=self.proxy.config.upstream_timeout_s) as response:
                self._reply(response.status, response.read(), list(response.headers.items()))
        except urllib.error.HTTPError as err:
            self._reply(err.code, err.read(), list(err.headers.items()))
        except (urllib.error.URLError, OSError) as err:
            raise HttpError(502, f"upstream {self.proxy.config.upstream} unreachable: {err}") from err


class Proxy:
    def __init__(self, config: ProxyConfig, fetcher: Fetcher):
        self.config, self.fetcher = config, fetcher

    def serve(self) -> ThreadingHTTPServer:
        handler = type("Handler", (_Handler,), {"proxy": self})
        server = ThreadingHTTPServer((self.config.host, self.config.port), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="relay-proxy-http", daemon=True).start()
        return server

    def run(self, stop: threading.Event) -> None:
        server = self.serve()
        host, port = server.server_address[:2]
        logger.info(f"admin proxy on http://{host}:{port} -> {self.config.upstream}; store {self.fetcher.store}")
        try:
            while not stop.is_set():
                if self.config.prefetch:
                    self._prefetch_latest()
                stop.wait(self.fetcher.config.poll_interval_s)
        finally:
            server.shutdown()
            server.server_close()

    def _prefetch_latest(self) -> None:
        try:
            listing = self.fetcher.listing()
            if listing and max(listing) not in self.fetcher.local_steps():
                self.fetcher.ensure_step(max(listing))
        except (RelayError, DecodeError, ManifestError, ProtocolError, TimeoutError) as err:
            logger.warning(f"prefetch: {err}")
