"""What the smoke shows while it runs: the stage on a spinner (or as timestamped lines), one line per finished RL step
with each channel's live figures, a teacher's failures once per teacher with the URL and the error, and a warning
at start when `--teacher-url` does not answer.

Everything is read from what PRIME-RL's processes write, as they write it: the orchestrator's and the trainer's logs
(the stage), `metrics.jsonl` (a step's orchestrator row marks the step done) and `rollouts/step_N/train/all/` (the
step's episodes, with their rewards, `composer/*` metrics and `trace.info["teacher"]`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from composer_prime.smoke.outdir import run_dir
from composer_prime.smoke.rehearsal import strip_ansi
from composer_prime.smoke.report import AGG, episodes, step_figures

WIDTH = 100
"""Console lines (the step lines, the report's table) fit this many columns."""


class Status:
    """Progress on the console: a rich spinner naming the running stage and the elapsed time, or plain timestamped
    lines; `note` prints a line that stays (above the spinner)."""

    def __init__(self, live: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        if not self.console.is_terminal:
            self.console.width = WIDTH  # a log file or a pipe: lines as the console shows them, not wrapped at 80
        self.start = time.monotonic()
        self.live = live and self.console.is_terminal
        self._status: Any = None

    def __enter__(self) -> Status:
        if self.live:
            self._status = self.console.status("starting")
            self._status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()

    def stage(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:6.1f}s] {text}"
        if self._status is not None:
            self._status.update(line[: max(20, self.console.width - 4)])
        else:
            self.console.print(line, highlight=False)

    def note(self, text: str) -> None:
        self.console.print(f"[{time.monotonic() - self.start:6.1f}s] {text}", highlight=False)


def newest(log: Path, markers: tuple[str, ...]) -> str:
    """The last line of `log`'s tail holding one of `markers`, shortened (its time stamp and level dropped)."""
    with log.open("rb") as f:
        f.seek(max(0, log.stat().st_size - 16384))
        lines = f.read().decode("utf-8", "replace").splitlines()
    for raw in reversed(lines):
        text = strip_ansi(raw)
        if any(m in text for m in markers):
            text = text.split("]:", 1)[-1].strip()  # torchrun's rank prefix
            words = text.split(maxsplit=2)
            return (words[2] if len(words) == 3 and words[1] in ("INFO", "SUCCESS", "WARNING") else text)[:27]
    return ""


def progress_line(work: Path, steps: int) -> str:
    """The running stage of PRIME-RL's run, in words: its processes starting, or the orchestrator's and the trainer's
    newest step lines (or what they wait for)."""
    folder = run_dir(work)
    logs = folder / "logs" / "latest" if folder else None
    if logs is None or not (logs / "orchestrator.log").is_file():
        return "rl: starting the inference server (vLLM), env server, orchestrator and trainer"
    parts = []
    for name, path in (("orchestrator", logs / "orchestrator.log"), ("trainer", logs / "trainer.log")):
        last = (
            newest(path, (" Step ", "Waiting for", "Train batch", "Starting", "Holding batch"))
            if path.is_file()
            else ""
        )
        parts.append(f"{name}: {last or 'starting'}")
    return f"rl ({steps}) | " + " | ".join(parts)  # within 100 columns with the time stamp


class StepLines:
    """One console line per RL step once PRIME-RL's orchestrator logged it, and each teacher's first failure once."""

    def __init__(self, work: Path, steps: int) -> None:
        self.work = work
        self.steps = steps
        self.shown: set[int] = set()
        self.failing: set[str] = set()
        self.start = time.monotonic()

    def poll(self) -> list[str]:
        folder = run_dir(self.work)
        if folder is None or not (folder / "metrics.jsonl").is_file():
            return []
        lines = []
        for step, row in sorted(orchestrator_rows(folder / "metrics.jsonl").items()):
            if step in self.shown:
                continue
            self.shown.add(step)
            rows = episodes(folder, step)
            lines.append(step_line(step, self.steps, step_figures(rows, row)))
            for name, error in teacher_errors(rows).items():
                if name not in self.failing:
                    self.failing.add(name)
                    lines.append(f"warning: teacher {name!r} failed at step {step}: {error}"[:300])
        return lines


def orchestrator_rows(path: Path) -> dict[int, dict[str, Any]]:
    """Per step, the orchestrator's row of `metrics.jsonl` (written when it shipped the step's batch)."""
    rows: dict[int, dict[str, Any]] = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(row, dict) and "step" in row and any(key.startswith(AGG) for key in row):
            rows[int(row["step"])] = row
    return rows


def step_line(step: int, steps: int, figures: dict[str, float]) -> str:
    """`step 1/3  reward 0.50  pass 50%  flat 1/2  hints 3  replay 4.0  teachers 0/24 failed`: the mean reward and
    pass rate, groups whose rewards were all equal (no outcome signal) of all groups, hint targets scored, replay
    steps per trace, failed of all teacher queries. Fits `WIDTH` behind the console's 10-column time stamp."""
    replay = figures.get("replay_steps")
    return "  ".join(
        [
            f"step {step}/{steps}",
            f"reward {figures['reward_mean']:.2f}",
            f"pass {figures['pass_rate']:.0%}",
            f"flat {figures['groups_all_equal']:.0f}/{figures['groups']:.0f}",
            f"hints {figures.get('hint_targets_scored', 0):.0f}",
            f"replay {'-' if replay is None else f'{float(replay):.1f}'}",
            f"teachers {figures['teacher_failed_queries']:.0f}/{figures['teacher_queries']:.0f} failed",
        ]
    )[: WIDTH - 10]


def teacher_errors(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Teacher name -> the first error (with its URL) recorded on any trace of these episodes."""
    found: dict[str, str] = {}
    for row in rows:
        for trace in row.get("traces") or []:
            for name, error in (((trace.get("info") or {}).get("teacher") or {}).get("errors") or {}).items():
                found.setdefault(str(name), str(error))
    return found


def teacher_url_warning(url: str, timeout_s: float = 5.0) -> str | None:
    """Why `--teacher-url` cannot be used, or None when it answers HTTP (any status: the key may be what fails)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return (
            f"warning: --teacher-url {url} does not answer ({reason}); every teacher query will fail and the replay "
            "channel will train nothing. The run goes on; fix the URL or drop --teacher-url for the local teachers"
        )
