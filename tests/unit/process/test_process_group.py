"""A child run as a process group ends whole and fast: its group and every process below it, whatever session it
made for itself."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from composer_prime.process.children import stop_group
from composer_prime.process.group import GRACE_S, group


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_stop_ends_the_whole_group_fast(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # A child that ignores SIGTERM and a grandchild: both go, SIGKILL after the grace period.
    # The grandchild also leads a session of its own and ignores SIGTERM, as torch elastic's ranks and sandbox keepers
    # do: only the walk of the process tree reaches it.
    script = f"trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 300' & echo $! > {pids}; sleep 300"
    start = time.monotonic()
    with group(["sh", "-c", script], tmp_path / "log") as process:
        while not pids.exists() or not pids.read_text().strip():
            time.sleep(0.05)
        grandchild = int(pids.read_text())
    assert time.monotonic() - start < 5
    assert process.returncode == -signal.SIGKILL
    time.sleep(0.2)
    assert not _alive(grandchild)
    stop_group(process, GRACE_S)  # idempotent
