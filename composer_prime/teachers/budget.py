"""Dollar ceilings per trace and per run, enforced from token accounting times price.

Before a query the hook reserves its worst case (estimated prompt tokens at the input price plus `max_output_tokens`
at the output price); the query is sent only if the reservation fits under every ceiling. After the answer the
reservation is replaced by the billed cost (usage tokens times price; the estimate when a server reports no usage).
So concurrent queries can never overshoot a ceiling, and a refused reservation means the budget is spent.

The run ceiling is counted in a ledger file when one is configured: a JSON number of dollars, read and rewritten
under a `filelock` lock by every process that names the same file. Without a file it is counted per process.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from filelock import FileLock, Timeout

from composer_prime.atomic import write_atomic
from composer_prime.teachers.config import BudgetConfig

logger = logging.getLogger(__name__)

_process_spend: dict[str, float] = {}
_process_lock = threading.Lock()


class RunLedger:
    """The run's spend so far, shared through `path` (or this process when None)."""

    def __init__(self, limit: float | None, path: Path | None):
        self.limit = limit
        self.path = path

    def _update(self, delta: float, check: bool) -> bool:
        if self.path is None:
            with _process_lock:
                spent = _process_spend.get("run", 0.0)
                if check and self.limit is not None and spent + delta > self.limit:
                    return False
                _process_spend["run"] = max(0.0, spent + delta)
                return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(self.path) + ".lock", timeout=10):
                try:
                    spent = float(json.loads(self.path.read_text(encoding="utf-8")))
                except (FileNotFoundError, ValueError, TypeError):
                    spent = 0.0
                if check and self.limit is not None and spent + delta > self.limit:
                    return False
                write_atomic(self.path, json.dumps(max(0.0, spent + delta)))
                return True
        except (Timeout, OSError) as e:
            logger.warning("teacher budget: ledger %s unusable (%s); no new spend is allowed", self.path, e)
            return False

    def reserve(self, usd: float) -> bool:
        return self.limit is None or self._update(usd, check=True)

    def settle(self, reserved: float, billed: float) -> None:
        if self.limit is not None:
            self._update(billed - reserved, check=False)

    def spent(self) -> float:
        if self.path is None:
            return _process_spend.get("run", 0.0)
        try:
            return float(json.loads(self.path.read_text(encoding="utf-8")))
        except (FileNotFoundError, ValueError, TypeError):
            return 0.0


class TraceBudget:
    """Spend of one trace against the per-trace and per-run ceilings (single event loop; no lock needed)."""

    def __init__(self, config: BudgetConfig):
        self.limit = config.usd_per_trace
        self.run = RunLedger(config.usd_per_run, config.ledger)
        self.reserved = 0.0
        self.billed = 0.0
        self.refused = 0
        """Queries not sent because a ceiling was reached."""

    def reserve(self, usd: float) -> bool:
        if self.limit is not None and self.billed + self.reserved + usd > self.limit:
            self.refused += 1
            return False
        if not self.run.reserve(usd):
            self.refused += 1
            return False
        self.reserved += usd
        return True

    def settle(self, reserved: float, billed: float) -> None:
        self.reserved -= reserved
        self.billed += billed
        self.run.settle(reserved, billed)
