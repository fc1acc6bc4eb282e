"""Smokes sharing a machine: an earlier run's logs survive the next run into the same `--out`, a run waiting on the
shared cache says once whom it waits for, and `--port` reserved by another run is refused (real processes, files
and locks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from composer_prime.local.launch import cache_lock
from composer_prime.local.tree import TreeError
from composer_prime.smoke.config import SmokeConfig
from composer_prime.smoke.outdir import KEPT_LOGS, MARKER, Busy
from composer_prime.smoke.run import execute, inference_port


def _failed_run(out: Path, text: str) -> None:
    """What a failed run leaves: its logs, and PRIME-RL's logs inside `work/`, linked from `logs/prime-rl`."""
    latest = out / "work" / "run" / "smoke" / "logs" / "latest"
    latest.mkdir(parents=True, exist_ok=True)
    (latest / "orchestrator.log").write_text(f"ZMQError: Address already in use ({text})")
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / "rl.log").write_text(text)
    (out / "logs" / "prime-rl").symlink_to(os.path.relpath(latest, out / "logs"))
    (out / MARKER).touch()


def test_a_failed_runs_logs_survive_the_next_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = SmokeConfig(prime_rl=tmp_path / "not-a-tree", out=out, cache=tmp_path / "cache", live=False)
    for run in range(KEPT_LOGS + 1):
        _failed_run(out, f"run {run}")
        with pytest.raises(TreeError):
            execute(config, [], tmp_path)  # fails after it replaced work/
        assert not (out / "work" / "run").exists()
        assert (out / "logs.1" / "rl.log").read_text() == f"run {run}"
        prime_rl = out / "logs.1" / "prime-rl"
        assert not prime_rl.is_symlink()  # a copy: the link's target went with work/
        assert f"({'run ' + str(run)})" in (prime_rl / "orchestrator.log").read_text()
        (out / "logs").rmdir()  # the failed run wrote nothing; the next "failed run" writes its own
    assert sorted(p.name for p in out.glob("logs.*")) == [f"logs.{k}" for k in range(1, KEPT_LOGS + 1)]
    assert (out / f"logs.{KEPT_LOGS}" / "rl.log").read_text() == "run 1"  # the oldest (run 0) was dropped


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from composer_prime.local.launch import cache_lock
    with cache_lock(Path(sys.argv[1]), "building the venvs", print):
        print("holding", flush=True)
        sys.stdin.read()
    """
)


def test_waiting_on_the_shared_cache_says_once_for_whom(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(cache)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "holding"
    notes: list[str] = []
    got = threading.Event()

    def wait() -> None:
        with cache_lock(cache, "preparing inputs", notes.append):
            got.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 30
    while not notes and time.monotonic() < deadline:  # the note comes before the wait, however loaded the machine
        time.sleep(0.05)
    time.sleep(0.5)
    assert not got.is_set()  # the holder still holds it
    assert len(notes) == 1
    assert f"pid {holder.pid}" in notes[0] and "building the venvs" in notes[0] and str(cache) in notes[0]
    holder.stdin.close()
    holder.wait(timeout=30)
    waiter.join(timeout=30)
    assert got.is_set() and len(notes) == 1
    with cache_lock(cache, "again", notes.append):  # free now: no note
        pass
    assert len(notes) == 1


def test_a_port_reserved_by_another_run_is_refused(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from composer_prime.process.ports import free_port; print(free_port(), flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    taken = int(holder.stdout.readline())
    try:
        with pytest.raises(Busy, match=f"--port = {taken}: the port is in use or reserved"):
            inference_port(taken)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert inference_port(taken) == taken  # released with its holder
