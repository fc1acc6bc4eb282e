"""The inference-side admin proxy: PRIME-RL's `admin_base_url` for a remote vLLM server.

PRIME-RL's orchestrator drives weight updates through admin endpoints (`POST /pause`, `POST /update_weights
{"weight_dir": "<output_dir>/broadcasts/step_N"}`, `POST /resume`, `GET /health`, `GET /v1/models`). That path is
on the trainer host. The proxy takes `step_N` from it, makes sure the step is materialised locally (`Fetcher`), and
forwards the call to the real admin endpoint with `weight_dir` rewritten to the local copy. `POST /load_lora_adapter`
and vLLM's `/v1/load_lora_adapter` (`lora_path`) are handled the same way. Only the routes of `routes.ROUTES` are
forwarded (at their canonical path, headers included); every other request is a 403 naming the route.

Only the orchestrator may drive it: every request but `GET /health` must carry `Authorization: Bearer <token>` with
the token from `admin_token_file` / `admin_token_env` (PRIME-RL's admin client sends `Bearer $VLLM_API_KEY`, its
`api_key_var`), compared in constant time; others get a 401 and nothing is forwarded. The proxy binds one configured
address (loopback by default) and speaks HTTPS when given a certificate. After vLLM takes a step, the step's
publication is recorded as served, and nothing older is handed to vLLM again (`trust.py`).

Status codes follow what PRIME-RL's admin client retries: 4xx for requests that will never work (bad JSON, a path
that is not a broadcast step dir: not retried), 502 when the relay cannot provide the step, 504 when the step was not
published in time (both retried by PRIME-RL within its budget). Requests are served concurrently (aiohttp): a step
that is built answers at once while another request waits for an unpublished one, upstream answers are streamed
back rather than buffered, and a caller that disconnects stops the wait it started.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable
from pathlib import Path, PurePosixPath

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.relay.checkpoint import DecodeError
from composer_prime.relay.client import ClientConfig, Fetcher
from composer_prime.relay.http import Served, serve_in_thread
from composer_prime.relay.manifest import ManifestError
from composer_prime.relay.protocol import ProtocolError
from composer_prime.relay.routes import Forbidden, Route, canonical
from composer_prime.relay.signing import check_owner_only
from composer_prime.relay.transport import NotPublished, RelayError, server_tls

logger = logging.getLogger("composer_prime.relay.proxy")
_STEP = re.compile(r"^step_(\d+)$")
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
    "proxy-authorization",
    "proxy-authenticate",
}


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(pattern=r"^https?://")
    """The real vLLM admin base URL on this host, e.g. `http://127.0.0.1:8000` (no `/v1`)."""
    admin_token_file: Path | None = None
    """File holding the token every caller must present as `Authorization: Bearer <token>` (PRIME-RL's orchestrator
    sends the value of its `api_key_var`, `VLLM_API_KEY`); at least 16 characters, readable by its owner only. This
    or `admin_token_env`."""
    admin_token_env: str | None = None
    """Name of the environment variable holding that token, instead of `admin_token_file`."""
    host: str = "127.0.0.1"
    """The one address the proxy binds: the interface PRIME-RL's orchestrator reaches (its `admin_base_url` points
    here). The default serves callers on this host only."""
    port: int = Field(8100, ge=0, le=65535)
    """Proxy port (0 picks a free one)."""
    admin_tls_cert_file: Path | None = None
    """TLS certificate chain (PEM): set, the proxy speaks HTTPS only, so the token never crosses the network in the
    clear (`admin_base_url` then says `https://`)."""
    admin_tls_key_file: Path | None = None
    """Private key (PEM, unencrypted, readable by its owner only) of `admin_tls_cert_file`."""
    upstream_timeout_s: float = Field(720.0, gt=0)
    """Timeout of a forwarded call (PRIME-RL allows 720 s for `/update_weights`)."""
    max_body_bytes: int = Field(1 << 20, ge=1024)
    """Largest request body accepted."""
    prefetch: bool = True
    """Build each newly listed step in the background, so `/update_weights` usually finds it ready."""
    verify: bool = True
    """Before forwarding a step that was built earlier, re-hash its files against the blake3 digests recorded when it
    was built (it may have been damaged on disk since); a damaged step is rebuilt. Costs one read of the checkpoint
    per `/update_weights` (docs/relay.md gives the rate)."""

    @model_validator(mode="after")
    def _token_and_tls(self) -> ProxyConfig:
        load_admin_token(self)
        if (self.admin_tls_cert_file is None) != (self.admin_tls_key_file is None):
            raise ValueError(
                f"admin_tls_cert_file = {self.admin_tls_cert_file} and admin_tls_key_file = "
                f"{self.admin_tls_key_file}: give both (the proxy's certificate and its key) or neither"
            )
        server_tls(self.admin_tls_cert_file, self.admin_tls_key_file, None, ADMIN_TLS_FIELDS)
        return self


MIN_TOKEN_CHARS = 16
ADMIN_TLS_FIELDS = ("admin_tls_cert_file", "admin_tls_key_file", "")
HEALTH_PROBE_S = 10.0
"""Longest an unauthenticated `GET /health` waits for vLLM's own."""


def load_admin_token(config: ProxyConfig) -> str:
    """The admin token from `admin_token_file` or `admin_token_env`; ValueError naming the field and the fix."""
    file, env = config.admin_token_file, config.admin_token_env
    if (file is None) == (env is None):
        raise ValueError(
            f"admin_token_file = {file} and admin_token_env = {env}: set exactly one. The admin routes accept only "
            "callers presenting this token (PRIME-RL's orchestrator sends $VLLM_API_KEY); make one with "
            "`openssl rand -hex 32`"
        )
    if file is not None:
        check_owner_only(file, "admin_token_file")
        try:
            token, source = file.read_text().strip(), f"admin_token_file = '{file}'"
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(
                f"admin_token_file = '{file}' cannot be read ({err}); give a file holding the token"
            ) from None
    else:
        token, source = os.environ.get(env, "").strip(), f"admin_token_env = {env!r}"
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ValueError(
            f"{source} gives a token of {len(token)} characters{' with spaces' if ' ' in token else ''}; use at "
            f"least {MIN_TOKEN_CHARS} non-space characters, e.g. `openssl rand -hex 32`"
        )
    return token


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
    path = PurePosixPath(path_value.rstrip("/"))
    if path.name == "weight" and path.parent.parent.name == "checkpoints":
        path = path.parent  # a resume: PRIME-RL's `get_weight_dir` prefers `checkpoints/step_N/weight` when it is there
    match = _STEP.match(path.name)
    if match is None:
        raise HttpError(
            400,
            f"{field}={path_value!r} is not a PRIME-RL weight dir; the relay serves the filesystem broadcast's "
            "'<output_dir>/broadcasts/step_<N>' and a resume's '<output_dir>/checkpoints/step_<N>/weight' (as step N, "
            "which the trainer broadcasts again at its start)",
        )
    return int(match[1])


async def _to_caller(request: web.Request, write: Awaitable[object]) -> bool:
    """Await one write of the answer to the caller; False when the caller hung up, which is its right (a readiness
    probe closes after the status line), not an upstream failure: logged, nothing more is sent."""
    try:
        await write
        return True
    except ConnectionResetError as err:  # aiohttp's ClientConnectionResetError: "Cannot write to closing transport"
        logger.info(f"{request.method} {request.path}: the caller went away before the answer was sent ({err})")
        return False


def _error(status: int, message: str) -> web.Response:
    logger.warning(f"-> {status}: {message}")
    return web.json_response({"error": message}, status=status)


class Proxy:
    """The admin proxy: an aiohttp server (its own thread) plus the prefetch loop in `run`."""

    def __init__(self, config: ProxyConfig, fetcher: Fetcher):
        self.config, self.fetcher = config, fetcher
        self._token = f"Bearer {load_admin_token(config)}".encode()
        self._session: aiohttp.ClientSession | None = None
        self._prefetch_failing: str | None = None  # the last prefetch failure, logged once until it changes

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_route("*", "/{path:.*}", self._handle)
        app.on_startup.append(self._open_session)
        app.on_cleanup.append(self._close_session)
        return app

    async def _open_session(self, _app: web.Application) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.upstream_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)

    async def _close_session(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def _authorised(self, request: web.Request) -> bool:
        return hmac.compare_digest(request.headers.get("Authorization", "").encode("utf-8", "replace"), self._token)

    async def _health(self) -> web.Response:
        """`GET /health` without the token (a readiness probe): vLLM's status, and nothing else of it. Its body,
        headers and address, and why it is down, go to the log, not to a caller that holds no token."""
        assert self._session is not None
        url = self.config.upstream.rstrip("/") + "/health"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=HEALTH_PROBE_S)) as upstream:
                ready = 200 <= upstream.status < 300
                if not ready:
                    logger.warning(f"GET /health: upstream {url} answered {upstream.status}")
        except (aiohttp.ClientError, TimeoutError) as err:
            logger.warning(f"GET /health: upstream {url} unreachable: {type(err).__name__}: {err}")
            ready = False
        if ready:
            return web.json_response({"status": "ok"})
        return web.json_response({"error": "the inference server is not ready"}, status=503)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            if request.method in ("GET", "HEAD") and request.path.strip("/") == "health":
                return await self._health()  # readiness probes need no token, and learn nothing more
            peer = request.remote
            logger.warning(f"refused {request.method} {request.path} from {peer}: missing or wrong admin token")
            response = web.json_response(
                {
                    "error": "missing or wrong admin token: send `Authorization: Bearer <token>` with the token the "
                    "relay client was given (admin_token_file or admin_token_env)"
                },
                status=401,
            )
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        try:
            route, entry = canonical(request.method, request.path)
        except Forbidden as err:
            return _error(403, str(err))
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body exceeds max_body_bytes={self.config.max_body_bytes}")
        pinned = None
        try:
            if entry.loads is not None:
                body, pinned = await self._materialise(route, entry, body)
            response = await self._forward(request, route, body)
            if pinned is not None and route == "/update_weights" and 200 <= response.status < 300:
                self.fetcher.mark_served(pinned)  # from now on nothing published before it is handed to vLLM
            return response
        except HttpError as err:
            return _error(err.status, str(err))
        finally:
            if pinned is not None:
                self.fetcher.release(pinned)

    async def _materialise(self, route: str, entry: Route, body: bytes) -> tuple[bytes, int]:
        """The body to forward (the listed fields, the step dir replaced by the verified local copy) and the step
        pinned for vLLM to read (released after forwarding)."""
        field = entry.loads
        assert field is not None
        try:
            payload = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError) as err:
            raise HttpError(400, f"POST {route} body is not JSON: {err}") from err
        if not isinstance(payload, dict):
            raise HttpError(400, f"POST {route} needs a JSON object with {field!r}, got {type(payload).__name__}")
        if payload.get(field) is None:
            raise HttpError(
                403,
                f"POST {route} without {field!r} is refused: vLLM would load weights from somewhere other than a "
                "signed step (an NCCL broadcast); the relay carries PRIME-RL's filesystem broadcast only",
            )
        extra = sorted(set(payload) - entry.fields - {field})
        if extra:
            raise HttpError(
                403,
                f"POST {route} with field(s) {extra} is refused: the relay forwards only {field!r} (rewritten to the "
                f"verified step) and {sorted(entry.fields) or 'nothing else'}",
            )
        step = step_of(payload[field], field, route)
        local = await self._ensure(step)
        payload[field] = local.as_posix()
        return json.dumps(payload).encode(), step

    async def _ensure(self, step: int) -> Path:
        """Build (or find and verify) `step` in a worker thread, pinned. A caller that disconnects cancels the wait;
        a build that finishes anyway is released, never leaked."""
        cancel = threading.Event()
        future = asyncio.get_running_loop().run_in_executor(
            None, lambda: self.fetcher.ensure_step(step, pin=True, cancel=cancel, verify=self.config.verify)
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancel.set()
            future.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self.fetcher.release(step))
            logger.info(f"step_{step}: the caller went away; stopped waiting")
            raise
        except TimeoutError as err:
            raise HttpError(504, str(err)) from err
        except (RelayError, DecodeError, ManifestError, ProtocolError) as err:
            # Nothing reaches vLLM: it keeps the weights it has. Refused (forged, replayed) is a 502 too: PRIME-RL
            # retries, and an honest relay answering again ends the outage.
            raise HttpError(502, f"cannot materialise step {step}: {err}") from err

    async def _forward(self, request: web.Request, route: str, body: bytes) -> web.StreamResponse:
        """Send the request to `route` upstream (its canonical path, the caller's query) and stream the answer back
        (status, headers and body). A redirect is answered as is, never followed: what vLLM runs is the route the
        allow-list matched."""
        assert self._session is not None
        query = request.rel_url.raw_query_string
        url = self.config.upstream.rstrip("/") + route + (f"?{query}" if query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            async with self._session.request(
                request.method, url, data=body or None, headers=headers, allow_redirects=False
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for key, value in upstream.headers.items():
                    if key.lower() not in _HOP_BY_HOP and key.lower() not in ("server", "date"):
                        response.headers.add(key, value)
                if upstream.content_length is not None:
                    response.content_length = upstream.content_length
                if not await _to_caller(request, response.prepare(request)):
                    return response
                async for chunk in upstream.content.iter_chunked(1 << 16):
                    if not await _to_caller(request, response.write(chunk)):
                        return response
                await _to_caller(request, response.write_eof())
                return response
        except (aiohttp.ClientError, TimeoutError) as err:
            raise HttpError(502, f"upstream {self.config.upstream} unreachable: {type(err).__name__}: {err}") from err

    def serve(self) -> Served:
        tls = server_tls(self.config.admin_tls_cert_file, self.config.admin_tls_key_file, None)
        return serve_in_thread(self.app(), self.config.host, self.config.port, "relay-proxy-http", tls)

    def run(self, stop: threading.Event) -> None:
        server = self.serve()
        logger.info(f"admin proxy on {server.url} -> {self.config.upstream}; store {self.fetcher.store}")
        try:
            while not stop.is_set():
                if self.config.prefetch:
                    self._prefetch_latest()
                stop.wait(self.fetcher.config.poll_interval_s)
        finally:
            server.stop()

    def _prefetch_latest(self) -> None:
        """One poll of the listing (twice a second by default): it logs what changed (a step built, a new failure,
        the relay answering again), never the poll itself."""
        try:
            listing = self.fetcher.listing()
            if listing and max(listing) not in self.fetcher.local_steps():
                self.fetcher.ensure_step(max(listing), wait_for_newer=False)
        except NotPublished:
            logger.debug("prefetch: the origin has published nothing yet")
        except (RelayError, DecodeError, ManifestError, ProtocolError, TimeoutError, ValueError) as err:
            if str(err) != self._prefetch_failing:
                logger.warning(f"prefetch: {err} (logged once; retried every {self.fetcher.config.poll_interval_s}s)")
                self._prefetch_failing = str(err)
            return
        if self._prefetch_failing is not None:
            logger.info("prefetch: the relay answers again")
            self._prefetch_failing = None
