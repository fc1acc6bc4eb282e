"""Hostile mirrors an independent review of the relay (issue 32) brought: a listing line that killed the client, a
slow-loris mirror that cost every file its deadline, a mirror listing an unpublished step that cut the wait short.
Each is a relay server in `--servers` (a compromised SHARDCAST mirror, or whoever answers at the origin's address)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.relay.test_relay_attacks import Client, publish, site  # noqa: F401 - the fixture
from tests.support.relay_procs import http, start_client
from tests.support.vllm_admin import AdminStandIn, dir_digests

pytestmark = pytest.mark.timeout(180)


class Hostile:
    """A relay server (a compromised mirror, or whoever answers at the origin's address)."""

    def __init__(self, answer):
        self.answer = answer  # (handler, path) -> None: writes the whole answer

        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                try:
                    hostile.answer(self, self.path.lstrip("/"))
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _send(handler, status: int, body: bytes):
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_a_listing_line_with_a_5000_digit_step_is_a_refused_listing_not_a_dead_client(tmp_path):
    """One line in distribution.txt (`v<5000 digits>: <hex>|1`) raised an uncaught ValueError (Python's int-digits
    limit) in the prefetch loop: the client process exited with a traceback and the admin proxy was gone."""
    bad = ("v" + "9" * 5000 + ": " + "a" * 64 + "|1\n").encode()
    hostile = Hostile(lambda h, path: _send(h, 200, bad) if path == "distribution.txt" else _send(h, 404, b""))
    with AdminStandIn() as vllm:
        client, url = start_client(hostile.url, vllm.url, tmp_path / "store", tmp_path / "client.log")
        with client:
            time.sleep(3)
            assert client.proc.poll() is None, f"client died:\n{client.log()[-1500:]}"
            assert http("GET", f"{url}/health", token=None, timeout=5)[0] == 200
    hostile.close()


def test_a_slow_loris_mirror_costs_one_deadline_not_one_per_file(site, tmp_path):  # noqa: F811
    """A mirror that trickles its answers (one byte per read) was never remembered as bad: every file of every step
    waited out its 10 x http_timeout_s deadline before the honest server was asked (300 s per file by default, stale
    weights for good). A server that runs out its time is now asked last for a while. Here http_timeout_s=0.3 (3 s
    deadline); the honest path alone takes well under a second."""
    steps, public, tap, vllm = site

    def trickle(handler, path):
        handler.send_response(200)
        handler.send_header("Connection", "close")  # no length: read until close
        handler.end_headers()
        handler.close_connection = True
        for _ in range(1000):
            handler.wfile.write(b"x")
            handler.wfile.flush()
            time.sleep(0.2)

    slow = Hostile(trickle)
    with Client(
        tmp_path / "c", f"{slow.url},{tap.upstream}", vllm.url, public, http_timeout_s=0.3, retries=2
    ) as client:
        started = time.monotonic()
        status, body = client.update(steps[2])
        took = time.monotonic() - started
        print(f"TOOK {took:.1f}s", status)
        assert status == 200, body
        assert vllm.updates()[-1].files == dir_digests(steps[2])
        # A hostile relay should cost its turn (one deadline or so), not one deadline per file.
        assert took < 4 * 3.0, f"one step took {took:.1f}s behind a slow mirror (deadline 3 s per file)"
    slow.close()


def test_a_mirror_listing_an_unpublished_step_does_not_cut_the_wait_short(site, tmp_path):  # noqa: F811
    """A mirror lists v3 (not yet published by the origin) with a garbage manifest: the client answered 502 within
    seconds instead of waiting wait_for_version_s for the honest v3. It now waits, as for a step nobody lists."""
    steps, public, tap, vllm = site
    honest = tap.upstream
    listing = http("GET", f"{honest}/distribution.txt", token=None)[1].decode()
    fake = listing + "v3: " + "b" * 64 + "|2\n"

    def lie(handler, path):
        if path == "distribution.txt":
            _send(handler, 200, fake.encode())
        else:
            _send(handler, 200, b"CPDELTA1" + b"\0" * 200)

    mirror = Hostile(lie)
    with Client(tmp_path / "c", f"{mirror.url},{honest}", vllm.url, public, wait_for_version_s=10) as client:
        assert client.update(steps[1])[0] == 200

        # Ask for step 3 before the origin has published it (it never does here): an honest client waits.
        out: dict = {}
        step3 = Path(str(steps[2]).replace("step_2", "step_3"))
        t = threading.Thread(target=lambda: out.setdefault("r", client.update(step3)))
        t.start()
        t.join(6)
        assert t.is_alive(), f"answered before the origin published v3: {out.get('r')}"
        t.join(30)
    mirror.close()
