"""What every launch of PRIME-RL's `rl` on this machine shares: the checkout it installs, the CPU launch config, the
cache of patched trees and venvs with its lock, and the ports PRIME-RL binds beyond the ones it is given."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

CPU_TOML = "tomls/cpu-smoke.toml"
"""PRIME-RL's launch config for this machine's CPUs, relative to the checkout (the smoke's; the realtime CPU demo
takes its CPU settings)."""
CACHE_LOCK = ".lock"
"""Held in the cache while a run builds or reads the venvs, the patched copy and the prepared inputs."""
CACHE_HOLDER = ".lock.holder"
"""Who holds `CACHE_LOCK` and for what (JSON: pid, command, doing, since), written by the holder once it has it."""
ENV_SERVER_PORTS = 4
"""Ports kept free from the env servers' base port on (one env server per source, the smoke's config has two)."""


def project_root() -> Path | None:
    """The composer-prime checkout this package runs from (the venvs install it), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / CPU_TOML).is_file() else None


def default_cache() -> Path:
    """Where the patched PRIME-RL copies and the venvs are kept between runs (the smoke's and the realtime demo's)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "composer-prime" / "smoke"


def holder(cache: Path) -> str:
    """Who holds the cache's lock, in words, from what the holder wrote (`CACHE_HOLDER`)."""
    try:
        info = json.loads((cache / CACHE_HOLDER).read_text())
        since = time.strftime("%H:%M:%S", time.localtime(float(info["since"])))
        return f"pid {int(info['pid'])} ({info['command']}), {info['doing']} since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another run"


@contextmanager
def cache_lock(cache: Path, doing: str, note: Callable[[str], None]) -> Iterator[None]:
    """Hold the cache's lock for `doing` (a run building or reading the venvs, the patched copy, the inputs). Where
    another run holds it, `note` is called once, naming that run and what it does, before this one waits."""
    from filelock import FileLock, Timeout

    from composer_prime.atomic import write_atomic

    cache.mkdir(parents=True, exist_ok=True)
    lock = FileLock(cache / CACHE_LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        note(
            f"waiting for the shared cache {cache}: {holder(cache)} holds its lock ({cache / CACHE_LOCK}); this run "
            "goes on when that one releases it"
        )
        lock.acquire()
    try:
        command = shlex.join(["composer-prime", *sys.argv[1:]])[:200]
        record = {"pid": os.getpid(), "command": command, "doing": doing, "since": time.time()}
        write_atomic(cache / CACHE_HOLDER, json.dumps(record))
        yield
    finally:
        (cache / CACHE_HOLDER).unlink(missing_ok=True)
        lock.release()
