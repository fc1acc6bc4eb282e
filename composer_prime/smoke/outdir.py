"""The smoke's `--out` folder: one smoke at a time, only folders a smoke made are replaced, and the logs of the
last `KEPT_LOGS` runs kept beside the new one.

`--out` holds `report.*`, `logs/` (the smoke's own logs and `logs/prime-rl`, a link to PRIME-RL's log folder inside
`work/`) and `work/` (tasks, model, PRIME-RL's run folder). A new run replaces `work/`; before that the previous
run's `logs/` becomes `logs.1/` (and `logs.1/` becomes `logs.2/`, ...), with PRIME-RL's logs copied in place of the
link, so a failed run's logs survive the run that follows it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = ".smoke.lock"
MARKER = ".composer-smoke"
"""Marks an `--out` a smoke wrote, whose `work/` and `logs/` a later smoke may replace."""
REPORTS = ("report.json", "report.png", "report.txt")
KEPT_LOGS = 3
"""Earlier runs' log folders kept (`logs.1/` the newest)."""


class Busy(RuntimeError):
    """Another smoke holds the lock on this `--out`, or it holds folders no smoke made."""


@contextmanager
def claimed(out: Path) -> Iterator[None]:
    """Hold `out` for one run: refused (`Busy`) while another smoke runs into it or where it holds `work/` or `logs/`
    that no smoke made; the previous run's report is removed, so a report beside a failed run is never a stale one."""
    from filelock import FileLock, Timeout

    out.mkdir(parents=True, exist_ok=True)
    foreign = [name for name in ("work", "logs") if (out / name).exists() and not (out / MARKER).exists()]
    if foreign:
        raise Busy(
            f"--out = {str(out)!r} holds {' and '.join(foreign)} that no smoke made (no {MARKER}); a smoke replaces those "
            "folders, so pass an empty or new --out"
        )
    lock = FileLock(out / LOCK)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise Busy(
            f"--out = {str(out)!r}: another composer-prime smoke is running into this folder (it holds {out / LOCK}); wait for it "
            "to end or pass another --out"
        ) from None
    try:
        (out / MARKER).touch()
        for stale in REPORTS:
            (out / stale).unlink(missing_ok=True)
        yield
    finally:
        lock.release()


def rotate_logs(out: Path) -> None:
    """`logs/` -> `logs.1/` -> ... -> `logs.KEPT_LOGS/` (the oldest dropped), PRIME-RL's linked logs copied in; then an
    empty `logs/`. Runs before `work/` (where the link points) is replaced."""
    logs = out / "logs"
    if logs.is_dir():
        link = logs / "prime-rl"
        if link.is_symlink():
            target = link.resolve()
            link.unlink()
            if target.is_dir():
                shutil.copytree(target, link, symlinks=True)
        oldest = out / f"logs.{KEPT_LOGS}"
        if oldest.exists():
            shutil.rmtree(oldest)
        for k in range(KEPT_LOGS - 1, 0, -1):
            if (out / f"logs.{k}").exists():
                (out / f"logs.{k}").rename(out / f"logs.{k + 1}")
        logs.rename(out / "logs.1")
    logs.mkdir()


def fresh(work: Path) -> None:
    """An empty work folder (the lock is held, so an existing one is a finished or killed earlier run's)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)


def run_dir(work: Path) -> Path | None:
    """PRIME-RL's run folder (`<output_dir>/<run name>`) in `work`, once the launcher made it."""
    found = sorted((work / "run").glob("*/configs"))
    return found[0].parent if found else None


@contextmanager
def linked_logs(work: Path, logs: Path) -> Iterator[None]:
    """On the way out (an end, a failure, Ctrl-C): `--out/logs/prime-rl`, a link to PRIME-RL's own logs
    (orchestrator, trainer, inference, env servers) of the run in `work`."""
    try:
        yield
    finally:
        folder = run_dir(work)
        if folder is not None and (folder / "logs").is_dir():
            target = logs / "prime-rl"
            target.unlink(missing_ok=True)
            target.symlink_to(os.path.relpath(folder / "logs" / "latest", logs))
