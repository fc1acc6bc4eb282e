"""The relay's HTTP servers: an aiohttp application run on its own event loop in a background thread.

The origin (static versions) and the client's admin proxy both run beside a synchronous main loop (the origin's
encoder, the proxy's prefetcher), so each serves from a thread that owns an event loop. `Served.stop()` shuts the
server down cleanly from the main thread.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError


class _QuietBadRequests(logging.Filter):
    """A malformed request is answered with a 400 and logged in one line, not as an error with a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if isinstance(err, HttpProcessingError) and 400 <= (err.code or 0) < 500:
            record.msg, record.args, record.exc_info, record.levelno = f"bad request: {err.message}", (), None, 10
            record.levelname = "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("aiohttp.server").addFilter(_QuietBadRequests())

BACKLOG = 1024
"""Pending connections the listening socket queues: many inference hosts poll the origin's listing at once."""


@dataclass
class Served:
    host: str
    port: int
    loop: asyncio.AbstractEventLoop
    runner: web.AppRunner
    thread: threading.Thread
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        future = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        try:
            future.result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)


def serve_in_thread(app: web.Application, host: str, port: int, name: str, tls: ssl.SSLContext | None = None) -> Served:
    """Start `app` on host:port (0 picks a free port), over TLS only when `tls` is given; raises OSError (port taken)
    in the caller's thread."""
    loop = asyncio.new_event_loop()
    started: dict[str, object] = {}
    ready = threading.Event()

    async def start() -> None:
        # A handler is cancelled when its client disconnects, so a caller that gave up stops the work it waited on.
        runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=BACKLOG, reuse_address=True, ssl_context=tls)
        await site.start()
        sockets = site._server.sockets if site._server else []  # noqa: SLF001 - aiohttp exposes no public getter
        started["runner"], started["port"] = runner, sockets[0].getsockname()[1]

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as err:  # noqa: BLE001 - reported to the caller below
            started["error"] = err
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.close()

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    ready.wait()
    if "error" in started:
        raise started["error"]  # type: ignore[misc]
    return Served(host, int(started["port"]), loop, started["runner"], thread, tls is not None)  # type: ignore[arg-type]
