"""Progress lines for long transfers: at most one every `every_s` seconds, plus a final one."""

from __future__ import annotations

import logging
import time


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class ProgressLog:
    def __init__(self, logger: logging.Logger, what: str, total: int, every_s: float = 2.0):
        self.logger, self.what, self.total, self.every_s = logger, what, total, every_s
        self.done = 0
        self.start = self._last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            pct = 100 * self.done / self.total if self.total else 100.0
            rate = self.done / max(now - self.start, 1e-9)
            self.logger.info(f"{self.what}: {pct:5.1f}% of {human_bytes(self.total)} ({human_bytes(rate)}/s)")

    def elapsed(self) -> float:
        return time.monotonic() - self.start
