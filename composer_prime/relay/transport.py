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

from composer_prime.relay import protocol
from composer_prime.relay.manifest import ManifestError

logger = logging.getLogger("composer_prime.relay.client")
T = TypeVar("T")


class RelayError(RuntimeError):
    """The relay cannot provide the step (unreachable, not published in time, or the chain is broken)."""


class NotPublished(RelayError):
    """The relay has no listing yet: the origin has not published its first version."""


class Cancelled(RelayError):
    """The caller that asked for the step went away."""


class Refused(RelayError):
    """What the relay served is not something the origin published, or is older than what this host serves:
    unsigned, wrongly signed, replayed or out of order. Never retried; nothing of it is applied."""


def server_tls(cert_file: Path | None, key_file: Path | None, client_ca_file: Path | None) -> ssl.SSLContext | None:
    """The TLS context a server listens with (None: plain HTTP). Raises ssl.SSLError / OSError on bad files."""
    if cert_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_tls(ca_file: Path | None, cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext:
    """The TLS context a fetcher verifies servers with: `ca_file`, else the system's trust store."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


def check_tls_files(fields: dict[str, Path | None], check: Callable[[], object]) -> None:
    """Run `check` (which loads the files); ValueError naming the fields and the reason when they do not load."""
    try:
        check()
    except (OSError, ssl.SSLError) as err:
        named = ", ".join(f"{name} = '{path}'" for name, path in fields.items() if path is not None)
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ValueError(
            f"{named}: cannot load ({reason}); give PEM files: the certificate chain and its unencrypted private key"
            + (", and the CA that signs the other side's certificate" if len(fields) > 2 else "")
        ) from None


LISTING_LIMIT = 1 << 20
"""Largest listing (`distribution.txt`) a client reads: a line per published version."""
MANIFEST_LIMIT = 64 << 20
"""Largest manifest shard a client reads (tens of KB for a 32B model's tensors)."""


class Remote:
    """GETs from a list of relay servers (the origin and SHARDCAST relays), tried in turn. Every body is read with a
    cap (the listing and a manifest have fixed ones, a body shard the size its signed manifest gives), as sent
    (`Accept-Encoding: identity`; a compressed answer is refused, so a small body cannot inflate), and within a
    deadline for the whole request (`timeout_s` per read, 10 x `timeout_s` in all), so an answer that is too big or
    too slow costs that server's turn, never the client's memory or its build."""

    def __init__(self, servers: list[str], timeout_s: float, retries: int, tls: ssl.SSLContext):
        self.servers, self.retries, self.deadline_s = servers, retries, 10 * timeout_s
        self._http = httpx.Client(timeout=timeout_s, follow_redirects=False, verify=tls)

    def get(self, path: str, limit: int) -> bytes:
        """`path` from the first relay server that answers it whole within `limit` bytes and the deadline."""
        errors, missing = [], 0
        for server in self.servers:
            url = f"{server.rstrip('/')}/{path}"
            try:
                with self._http.stream("GET", url, headers={"Accept-Encoding": "identity"}) as response:
                    if response.status_code == 200:
                        return self._body(response, url, limit)
                    missing += response.status_code == 404
                    redirect = response.headers.get("location")
                    errors.append(f"{url}: HTTP {response.status_code}" + (f" (redirect to {redirect}, not followed)"
                                                                            if redirect else ""))  # fmt: skip
            except httpx.HTTPError as err:
                errors.append(f"{url}: {type(err).__name__}: {err}")
            except RelayError as err:
                errors.append(str(err))
        if path == protocol.DISTRIBUTION_FILE and missing == len(self.servers):
            raise NotPublished(f"no relay lists a version yet ({'; '.join(errors)})")
        raise RelayError("; ".join(errors))

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
                raise RelayError(f"{url}: not answered whole within {self.deadline_s:.0f}s (10 x http_timeout_s)")
        return bytes(body)

    def get_checked(self, path: str, check: Callable[[bytes], T], limit: int = MANIFEST_LIMIT) -> T:
        """`check(data)` of `path`, fetching again (bounded, with backoff) while the fetch fails or `check` finds
        the data damaged (raises RelayError or ManifestError). `Refused` from `check` is raised at once."""
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries),
            wait=tenacity.wait_exponential(multiplier=0.2, min=0.2, max=5.0),
            retry=tenacity.retry_if_exception_type((RelayError, ManifestError))
            & tenacity.retry_if_not_exception_type(Refused),
            before_sleep=lambda state: logger.warning(
                f"{path} attempt {state.attempt_number}/{self.retries}: {state.outcome.exception()}"
            ),
            reraise=True,
        )
        try:
            return retrying(lambda: check(self.get(path, limit)))
        except Refused:
            raise
        except (RelayError, ManifestError) as err:
            raise RelayError(f"{path} could not be fetched intact after {self.retries} attempts: {err}") from err

    def listing(self) -> dict[int, protocol.Listed]:
        data = self.get(protocol.DISTRIBUTION_FILE, LISTING_LIMIT)
        return protocol.parse_distribution(data.decode("utf-8", "replace"))

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
            if listing and step < max(listing):
                # The origin publishes steps in increasing order: a step behind the newest will never appear.
                raise RelayError(
                    f"v{step} is not published and never will be (the relay lists v{min(listing)}..v{max(listing)}: "
                    "the step was pruned, or the trainer deleted it before the origin encoded it)"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"v{step} was not published within wait_for_version_s={wait_s:.0f}s"
                    + (f" (last error: {last_error})" if last_error else "")
                )
            if cancel is not None:
                cancel.wait(poll_s)
            else:
                time.sleep(poll_s)
