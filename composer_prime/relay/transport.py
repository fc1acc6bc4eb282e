"""How the relay's ends reach each other: TLS from certificate files, and fetching from relay servers.

Servers (the origin, the client's admin proxy) speak TLS when given a certificate and key, and then only TLS; with a
client CA they also require a client certificate signed by it (mutual TLS). Fetchers verify the server against a CA
file (or the system's trust store for `https://` servers without one). A fetcher that speaks TLS never speaks plain
HTTP: its servers must all be `https://`, and redirects are never followed (a redirect is how a server would send a
client to a plain-HTTP copy).

`Remote` fetches a path from the first relay server that has it, and re-fetches (bounded, with backoff) while the
answer fails a check: a damaged shard is worth fetching again, a forged one is not (`Refused` is never retried).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import tenacity

from composer_prime.relay import protocol, signing
from composer_prime.relay.manifest import ManifestError

logger = logging.getLogger("composer_prime.relay.client")
T = TypeVar("T")


class RelayError(RuntimeError):
    """The relay cannot provide the step (unreachable, not published in time, or the chain is broken)."""


class NotPublished(RelayError):
    """The relay has no listing yet: the origin has not published its first version."""


class Cancelled(RelayError):
    """The caller that asked for the step went away."""


class _Missing(RelayError):
    """The server answered 404: it does not have the file (yet)."""


class _OutOfTime(RelayError):
    """A server did not send a whole answer within the deadline."""


SLOW_PENALTY = 10
"""How many deadlines a server that ran out its time is asked last (and left out of the listing polls)."""


class Refused(RelayError):
    """What the relay served is not something the origin published, or is older than what this host serves:
    unsigned, wrongly signed, replayed or out of order. Never retried; nothing of it is applied."""


def server_tls(
    cert_file: Path | None,
    key_file: Path | None,
    client_ca_file: Path | None,
    names: tuple[str, str, str] = ("tls_cert_file", "tls_key_file", "tls_client_ca_file"),
) -> ssl.SSLContext | None:
    """The TLS context a server listens with (None: plain HTTP). ValueError naming the field (`names`: the options
    that gave the certificate, its key and the client CA), the file and the fix when one does not load."""
    if cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, (names[0], cert_file), (names[1], key_file))
    if client_ca_file is not None:
        _load_ca(context, names[2], client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_tls(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    """The TLS context a fetcher verifies servers with: `ca_file`, else the system's trust store. ValueError naming
    the field, the file and the fix when one does not load."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        _load_ca(context, "tls_ca_file", ca_file)
    if cert_file is not None:
        _load_chain(context, ("tls_cert_file", cert_file), ("tls_key_file", key_file))
    return context


def _reason(err: OSError) -> str:
    return err.strerror if not isinstance(err, ssl.SSLError) and err.strerror else (err.reason or str(err))


def _readable(field: str, path: Path) -> None:
    try:
        Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"{field} = '{path}' cannot be read ({_reason(err)}); give the path of a PEM file") from None


def _load_chain(context: ssl.SSLContext, cert: tuple[str, Path], key: tuple[str, Path | None]) -> None:
    (cert_field, cert_file), (key_field, key_file) = cert, key
    _readable(cert_field, cert_file)
    if key_file is not None:
        _readable(key_field, key_file)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as err:
        raise ValueError(
            f"{cert_field} = '{cert_file}' with {key_field} = '{key_file}' does not load ({_reason(err)}); give "
            f"{cert_field} the PEM certificate (chain) and {key_field} its own private key, PEM and unencrypted"
        ) from None
    if key_file is not None:
        signing.check_owner_only(key_file, key_field)


def _load_ca(context: ssl.SSLContext, field: str, path: Path) -> None:
    _readable(field, path)
    try:
        context.load_verify_locations(path)
    except (OSError, ssl.SSLError) as err:
        raise ValueError(
            f"{field} = '{path}' holds no PEM CA certificate ({_reason(err)}); give the certificate of the CA that "
            "signs the other side's certificate"
        ) from None


def explain_tls(text: str, tls_fields: dict[str, Path | None]) -> str:
    """What a failed HTTPS fetch (`text`) means for this client's configuration, naming the option to change."""
    ca = tls_fields.get("tls_ca_file")
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        if "mismatch" in text:
            return (
                f"{text}: the server's certificate is not for this address; list the server in servers under a "
                "name (or IP) its certificate holds"
            )
        trusted = f"tls_ca_file = '{ca}'" if ca else "the system's trust store (tls_ca_file unset)"
        return (
            f"{text}: the server's certificate is not signed by {trusted}; set tls_ca_file to the CA that signs "
            "the origin's tls_cert_file"
        )
    if any(
        mark in text
        for mark in (
            "WRONG_VERSION_NUMBER",
            "wrong version number",
            "record layer failure",
            "HTTP_REQUEST",
            "packet length too long",
        )
    ):
        return (
            f"{text}: the server does not speak TLS; start it with tls_cert_file and tls_key_file (a client "
            "listing https:// servers never falls back to plain HTTP)"
        )
    if any(mark in text for mark in ("UNKNOWN_CA", "unknown ca", "BAD_CERTIFICATE", "bad certificate")):
        return (
            f"{text}: the server does not accept tls_cert_file = '{tls_fields.get('tls_cert_file')}'; give a "
            "client certificate signed by the CA in the origin's tls_client_ca_file"
        )
    if tls_fields.get("tls_cert_file") is None and any(
        mark in text
        for mark in (
            "CERTIFICATE_REQUIRED",
            "certificate required",
            "HANDSHAKE_FAILURE",
            "Server disconnected",
        )
    ):
        return (
            f"{text} (if the origin sets tls_client_ca_file it requires a client certificate: set tls_cert_file "
            "and tls_key_file)"
        )
    return text


LISTING_LIMIT = 1 << 20
"""Largest listing (`distribution.txt`) a client reads: a line per published version."""
MANIFEST_LIMIT = 64 << 20
"""Largest manifest shard a client reads (tens of KB for a 32B model's tensors)."""


class Remote:
    """GETs from a list of relay servers (the origin and SHARDCAST relays), tried in turn. Every body is read with a
    cap (the listing and a manifest have fixed ones, a body shard the size its signed manifest gives), as sent
    (`Accept-Encoding: identity`; a compressed answer is refused, so a small body cannot inflate), and within a
    deadline for the whole request (`timeout_s` per read, 10 x `timeout_s` in all), so an answer that is too big or
    too slow costs that server's turn, never the client's memory or its build. Connections are kept alive and reused
    (one TLS handshake per server and worker thread, not per shard)."""

    def __init__(
        self,
        servers: list[str],
        timeout_s: float,
        retries: int,
        tls: ssl.SSLContext,
        tls_fields: dict[str, Path | None] | None = None,
    ):
        self.servers, self.retries, self.deadline_s = servers, retries, 10 * timeout_s
        self.tls_fields = tls_fields or {}
        self.candidates: dict[int, list[protocol.Listed]] = {}  # step -> the distinct entries servers list for it
        self._http = httpx.Client(timeout=timeout_s, follow_redirects=False, verify=tls)
        self._slow_until: dict[str, float] = {}  # server -> until when it is asked last (it ran out its time)

    def order(self) -> list[str]:
        """The servers in the order to ask them: one that recently ran out its time (a slow-loris mirror) goes last for
        `SLOW_PENALTY` x the deadline, so it costs one file its deadline, not every file of every step."""
        now = time.monotonic()
        return sorted(self.servers, key=lambda server: self._slow_until.get(server, 0.0) > now)

    def _slow(self, server: str) -> bool:
        return self._slow_until.get(server, 0.0) > time.monotonic()

    def get(self, path: str, limit: int) -> bytes:
        """`path` from the first relay server that answers it whole within `limit` bytes and the deadline."""
        errors, missing = [], 0
        for server in self.order():
            try:
                return self.get_from(server, path, limit)
            except RelayError as err:
                errors.append(str(err))
                missing += isinstance(err, _Missing)
        if path == protocol.DISTRIBUTION_FILE and missing == len(self.servers):
            raise NotPublished(f"no relay lists a version yet ({'; '.join(errors)})")
        raise RelayError("; ".join(errors))

    def get_from(self, server: str, path: str, limit: int) -> bytes:
        """`path` from one relay server, whole, within `limit` bytes and the deadline; RelayError otherwise."""
        url = f"{server.rstrip('/')}/{path}"
        try:
            with self._http.stream("GET", url, headers={"Accept-Encoding": "identity"}) as response:
                if response.status_code == 200:
                    try:
                        return self._body(response, url, limit)
                    except _OutOfTime:
                        self._slow_until[server] = time.monotonic() + SLOW_PENALTY * self.deadline_s
                        raise
                redirect = response.headers.get("location")
                error = _Missing if response.status_code == 404 else RelayError
                raise error(
                    f"{url}: HTTP {response.status_code}"
                    + (f" (redirect to {redirect}, not followed)" if redirect else "")
                )
        except httpx.HTTPError as err:
            if isinstance(err, httpx.TimeoutException):
                self._slow_until[server] = time.monotonic() + SLOW_PENALTY * self.deadline_s
            message = f"{url}: {type(err).__name__}: {err}"
            raise RelayError(explain_tls(message, self.tls_fields) if url.startswith("https://") else message) from None

    def _body(self, response: httpx.Response, url: str, limit: int) -> bytes:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise RelayError(f"{url}: answered with Content-Encoding {encoding!r}; relays send files as they are")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise RelayError(f"{url}: {declared} bytes, more than the {limit} this file may have")
        body = bytearray()
        deadline = time.monotonic() + self.deadline_s
        for chunk in response.iter_raw():
            body += chunk
            if len(body) > limit:
                raise RelayError(f"{url}: more than the {limit} bytes this file may have")
            if time.monotonic() > deadline:
                raise _OutOfTime(f"{url}: not answered whole within {self.deadline_s:.0f}s (10 x http_timeout_s)")
        return bytes(body)

    def get_checked(self, path: str, check: Callable[[bytes], T], limit: int = MANIFEST_LIMIT) -> T:
        """`check(data)` of `path` from the first server whose answer passes it. An answer that fails `check`, damaged
        (RelayError, ManifestError) or refused (`Refused`: unsigned, forged), costs that server its turn and the
        next one is asked; a server that served a refused answer is not asked for `path` again. Rounds of the
        remaining servers repeat (bounded, with backoff) while answers are only damaged; `Refused` is raised when
        every server answered with something refused."""
        refused: dict[str, Refused] = {}

        def one_round() -> T:
            errors = []
            for server in self.order():
                if server in refused:
                    continue
                try:
                    return check(self.get_from(server, path, limit))
                except Refused as err:
                    refused[server] = err
                    if len(self.servers) > 1:
                        logger.warning(f"{server}/{path}: {err}; asking the next server")
                except (RelayError, ManifestError) as err:
                    errors.append(str(err))
            if len(refused) == len(self.servers):
                raise next(iter(refused.values()))
            raise RelayError("; ".join(errors + [f"{server}: {err}" for server, err in refused.items()]))

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries),
            wait=tenacity.wait_exponential(multiplier=0.2, min=0.2, max=5.0),
            retry=tenacity.retry_if_exception_type(RelayError) & tenacity.retry_if_not_exception_type(Refused),
            before_sleep=lambda state: logger.warning(
                f"{path} attempt {state.attempt_number}/{self.retries}: {state.outcome.exception()}"
            ),
            reraise=True,
        )
        try:
            return retrying(one_round)
        except Refused:
            raise
        except RelayError as err:
            raise RelayError(f"{path} could not be fetched intact after {self.retries} attempts: {err}") from err

    def listing(self) -> dict[int, protocol.Listed]:
        """Every version some relay server lists (the first server's entry where they differ). Each server's own
        entries are kept in `candidates`: a server that withholds a version, or lists another publication of it,
        does not hide what the others list."""
        merged: dict[int, protocol.Listed] = {}
        candidates: dict[int, list[protocol.Listed]] = {}
        errors, missing, answered = [], 0, 0
        servers = [server for server in self.order() if not self._slow(server)] or self.order()
        for server in servers:
            try:
                data = self.get_from(server, protocol.DISTRIBUTION_FILE, LISTING_LIMIT)
                listing = protocol.parse_distribution(data.decode("utf-8", "replace"))
            except (RelayError, protocol.ProtocolError) as err:
                errors.append(str(err))
                missing += isinstance(err, _Missing)
                continue
            answered += 1
            for step, listed in listing.items():
                merged.setdefault(step, listed)
                if listed not in candidates.setdefault(step, []):
                    candidates[step].append(listed)
        if not answered:
            if missing == len(servers):
                raise NotPublished(f"no relay lists a version yet ({'; '.join(errors)})")
            raise RelayError("; ".join(errors))
        self.candidates = candidates
        return merged

    def wait_listed(
        self, step: int, wait_s: float, poll_s: float, cancel: threading.Event | None = None
    ) -> dict[int, protocol.Listed]:
        """The listing once it names `step`: polled every `poll_s` for up to `wait_s` (`wait_for_version_s`)."""
        deadline = time.monotonic() + wait_s
        last_error = None
        while True:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"stopped waiting for v{step}: the request was cancelled")
            try:
                listing = self.listing()
            except (RelayError, protocol.ProtocolError) as err:
                listing, last_error = {}, err
            if step in listing:
                return listing
            if time.monotonic() > deadline:
                # A step behind the newest is waited for too: a resumed trainer re-broadcasts its start step.
                behind = (
                    f" (the relay lists v{min(listing)}..v{max(listing)}: a step behind the newest appears only when "
                    "the trainer writes it again, as a resumed trainer does with its first step; otherwise it was "
                    "pruned, or deleted by the trainer before the origin encoded it)"
                    if listing and step < max(listing)
                    else ""
                )
                raise TimeoutError(
                    f"v{step} was not published within wait_for_version_s={wait_s:.0f}s{behind}"
                    + (f" (last error: {last_error})" if last_error else "")
                )
            if cancel is not None:
                cancel.wait(poll_s)
            else:
                time.sleep(poll_s)
