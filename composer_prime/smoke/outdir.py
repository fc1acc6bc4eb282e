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


class NotResumable(RuntimeError):
    """`--resume` found no run, or no whole checkpoint, in `--out`, or nothing left to run."""


def complete_checkpoints(run: Path) -> list[int]:
    """Steps of `run/checkpoints/step_N/` that both halves wrote whole: the trainer's (torch DCP writes `.metadata`
    last) and the orchestrator's (`progress.pt`, renamed into place). The orchestrator checkpoints a step when it ships
    the batch, the trainer after training on it, so a killed run can hold a newer step that only one of them wrote."""
    steps = []
    for folder in (run / "checkpoints").glob("step_*"):
        step = folder.name.removeprefix("step_")
        if step.isdigit() and (folder / "trainer" / ".metadata").is_file():
            if (folder / "orchestrator" / "progress.pt").is_file():
                steps.append(int(step))
    return sorted(steps)


def resume_point(work: Path, steps: int) -> tuple[Path, int]:
    """The run folder in `work` and the step `--resume` continues after: its newest whole checkpoint."""
    run = run_dir(work)
    if run is None:
        raise NotResumable(
            f"--resume: {work} holds no PRIME-RL run folder (work/run/<name>/configs); start a run without --resume"
        )
    done = complete_checkpoints(run)
    if not done:
        raise NotResumable(
            f"--resume: {run / 'checkpoints'} holds no checkpoint both the trainer and the orchestrator wrote whole "
            "([ckpt] writes one per step from step 1 on); start a run without --resume"
        )
    if done[-1] >= steps:
        raise NotResumable(
            f"--resume: the run's newest checkpoint is step {done[-1]} and --steps = {steps}: nothing is left to run; "
            f"pass --steps {done[-1] + 1} or more"
        )
    return run, done[-1]
