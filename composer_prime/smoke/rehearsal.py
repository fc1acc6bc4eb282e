"""What the smoke rehearses of a launch besides training, read from PRIME-RL's outputs for the report: the eval
epochs (`[orchestrator.eval]`, rows of `metrics.jsonl`) and a resume from a checkpoint (`[resume]`, what the trainer
and the orchestrator log once they loaded it). docs/smoke.md, "The eval, the checkpoints and a resume"."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

EVAL_PICK = {
    "reward_mean": "all/agent/reward/mean",
    "pass_at_1": "effective/agent/pass@1",
    "errors": "all/has_error/mean",
    "turns": "all/num_turns/mean",
    "policy_version": "policy_version",
}
"""Eval figure -> PRIME-RL's metric under `eval/<source>/` (`Orchestrator.finalize_eval_batch`: one row per source
and step, logged when the eval epoch completes)."""


def is_train_row(row: dict[str, Any]) -> bool:
    """A `metrics.jsonl` row of a training step (the orchestrator's or the trainer's), not of an eval epoch."""
    return any(key not in ("step", "time") and not key.startswith("eval/") for key in row)


def eval_figures(path: Path) -> list[dict[str, Any]]:
    """Per eval epoch (source, step): its figures (`EVAL_PICK`) from `metrics.jsonl`; step 0 is PRIME-RL's base-model
    eval before training, then every `[orchestrator.eval] interval` steps. A resumed run's epoch replaces the killed
    run's of the same step."""
    by_step: dict[int, dict[str, Any]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        by_step[int(row.get("step", 0))].update({k: v for k, v in row.items() if k.startswith("eval/")})
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for step, row in by_step.items():
        for key in row:
            if key.endswith("/policy_version"):
                prefix = key.removesuffix("policy_version")
                source = prefix.removeprefix("eval/").rstrip("/")
                figures = {k: float(row[prefix + name]) for k, name in EVAL_PICK.items() if prefix + name in row}
                found[(source, step)] = {"source": source, "step": step, **figures}
    return [found[key] for key in sorted(found, key=lambda k: (k[1], k[0]))]


RESUMED = {
    "trainer": ("trainer.log", "Resuming training from checkpoint step"),
    "trainer_progress": ("trainer.log", "Starting from step"),
    "orchestrator": ("orchestrator.log", "Resuming orchestrator from checkpoint step"),
}
"""What PRIME-RL's trainer and orchestrator log once they loaded a checkpoint, and the trainer's progress after it
(the step it trains next, the tokens and samples it counted before: its checkpoint of step N is written before it
counts step N's)."""


def strip_ansi(text: str) -> str:
    """`text` without its terminal colour codes (PRIME-RL's logs carry them)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def resumed(run: Path, step: int | None) -> dict[str, Any] | None:
    """For a resumed run: the checkpoint step and PRIME-RL's own lines saying what it loaded (the newest attempt's
    logs, `logs/latest/`)."""
    if step is None:
        return None
    said: dict[str, Any] = {"from_step": step}
    for key, (name, marker) in RESUMED.items():
        log = run / "logs" / "latest" / name
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        hits = [strip_ansi(line) for line in lines if marker in line]
        said[key] = hits[0][hits[0].index(marker) :].strip() if hits else None
    return said
