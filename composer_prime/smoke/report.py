"""What the smoke run shows: a live status line while it runs, then a table per step, `report.json` and a plot.

The live display is a rich progress bar over the RL steps with the current stage and the elapsed time, plus one line
per finished step. The final table has one row per step with each stage's figures; the JSON holds the same numbers and the
setup; the PNG (matplotlib, Agg backend) plots reward mean and pass rate, and the loss, by step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Self

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from composer_prime.atomic import write_atomic

TABLES: list[tuple[str, list[tuple[str, str, str]]]] = [
    ("rollouts and teachers", [
        ("step", "step", "{:.0f}"),
        ("reward", "reward_mean", "{:.2f}"),
        ("pass rate", "pass_rate", "{:.0%}"),
        ("passed", "", ""),
        ("compacted", "compacted", "{:.0f}"),
        ("verdicts", "teacher_verdicts", "{:.0f}"),
        ("teacher $", "teacher_cost_usd", "{:.4f}"),
    ]),
    ("algorithm and loss", [
        ("step", "step", "{:.0f}"),
        ("targets", "hint_targets", "{:.0f}"),
        ("hint tok", "hint_tokens", "{:.0f}"),
        ("replayed", "replay_steps", "{:.0f}"),
        ("loss", "loss", "{:+.3f}"),
        ("pg", "composer/rl/pg_loss", "{:+.3f}"),
        ("hint", "composer/hint/loss", "{:+.1e}"),
        ("drift", "composer/drift/log_ratio_sq", "{:.1e}"),
    ]),
    ("weights", [
        ("step", "step", "{:.0f}"),
        ("changed", "changed_fraction", "{:.1%}"),
        ("delta KiB", "delta_bytes", "{:.0f}"),
        ("delta x", "delta_ratio", "{:.1f}"),
        ("relay s", "relay_s", "{:.2f}"),
        ("reload ms", "reload_ms", "{:.1f}"),
        ("|dlogp|", "logprob_change", "{:.1e}"),
        ("step s", "seconds", "{:.0f}"),
    ]),
]  # fmt: skip
"""The tables printed after the run: (title, [(header, report key, format)]). `passed` is passing rollouts over
graded ones; changed is the share of bf16 values the step changed, delta x the checkpoint size over the delta size,
|dlogp| the mean change of the server's logprobs on a probe sequence across the reload."""


class Reporter:
    """The live display: a rich progress bar over the RL steps with the current stage and the elapsed time, and a
    line per finished step. Without a terminal (or with `live=False`) each stage is a plain timestamped line."""

    def __init__(self, console: Console | None = None, live: bool = True):
        self.console = console or Console(stderr=True)
        self._start = time.monotonic()
        self._progress: Progress | None = None
        if live and self.console.is_terminal:
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=self.console,
            )  # fmt: skip
            self._task = self._progress.add_task("starting", total=None)

    def __enter__(self) -> Self:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def set_steps(self, steps: int) -> None:
        """The number of RL steps the bar counts to."""
        if self._progress is not None:
            self._progress.update(self._task, total=steps)

    def stage(self, text: str, step: int | None = None) -> None:
        """A new stage begins (`step`: the RL step it belongs to, None during setup)."""
        if self._progress is None:
            self.console.print(f"[{time.monotonic() - self._start:6.1f}s] {text}")
        self.status(text)

    def status(self, text: str) -> None:
        """Progress within a stage (shown live only)."""
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def step_done(self, figures: dict[str, float]) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)
        self.console.print(
            f"step {figures['step']:.0f}: reward {figures['reward_mean']:.2f} ({figures['passed']:.0f} pass / "
            f"{figures['failed']:.0f} fail), {figures['compacted']:.0f} compacted, {figures['hint_targets']:.0f} hint "
            f"targets, {figures['teacher_verdicts']:.0f} verdicts, loss {figures['loss']:+.4f}, delta "
            f"{figures['delta_bytes'] / 1024:.1f} KiB, reload |dlogp| {figures['logprob_change']:.2e} "
            f"({figures['seconds']:.0f}s)"
        )


def tables(report: dict[str, Any]) -> list[Table]:
    out = []
    for title, columns in TABLES:
        grid = Table(title=f"composer-prime smoke: {title}", box=box.SIMPLE_HEAD)
        for header, _, _ in columns:
            grid.add_column(header, justify="right")
        for row in report["steps"]:
            cells = []
            for _, key, fmt in columns:
                if not key:
                    cells.append(f"{row['passed']:.0f}/{row['passed'] + row['failed']:.0f}")
                elif key == "delta_bytes":
                    cells.append(fmt.format(row[key] / 1024))
                else:
                    cells.append(fmt.format(row.get(key, 0.0)))
            grid.add_row(*cells)
        out.append(grid)
    return out


def write_json(report: dict[str, Any], path: Path) -> None:
    write_atomic(path, json.dumps(report, indent=2, sort_keys=True).encode())


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in report["steps"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(steps, [r["reward_mean"] for r in report["steps"]], marker="o", label="reward mean")
    left.plot(steps, [r["pass_rate"] for r in report["steps"]], marker="s", label="pass rate")
    left.set_xlabel("step")
    left.set_ylim(-0.05, 1.05)
    left.legend()
    left.set_title("reward")
    right.plot(steps, [r["loss"] for r in report["steps"]], marker="o", color="tab:red", label="loss")
    right.plot(steps, [r.get("composer/rl/pg_loss", 0.0) for r in report["steps"]], marker="x", label="pg term")
    right.set_xlabel("step")
    right.legend()
    right.set_title("loss")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
