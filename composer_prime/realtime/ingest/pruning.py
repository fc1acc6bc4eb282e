"""How far back the `realtime-sessions` journal must reach: PRIME-RL's oldest kept checkpoint (docs/realtime.md).

The journal replays every bundle it handed out because PRIME-RL checkpoints a count, not the tasks: its orchestrator
writes `<run dir>/checkpoints/step_N/orchestrator/progress.pt` (`orchestrator/ckpt.py`: `torch.save` of
`{"progress", "train_source": {"rng", "envs": {<source name>: {"sampler": {"cursor": <tasks drawn>}, "gates"}}}}`,
under a temp name, then renamed), and a resume loads one kept step dir (the latest, or `resume.step`) and draws and
discards `cursor` tasks from a fresh iterator (`StandardSampler.load_state_dict`). The trainer deletes whole step dirs
that `ckpt.keep_last` / `ckpt.keep_interval` do not keep (`trainer/ckpt.py`, `maybe_clean`), so the step dirs present
are every checkpoint PRIME-RL can still resume from. Draw counts grow with the step, so every resume discards at least
the oldest kept checkpoint's `cursor` bundles: below it the journal needs only the count, never the bundles.

`newest_step` reads the other half of PRIME-RL's run dir the source ages sessions by: the newest finished broadcast.
"""

from __future__ import annotations

import json
from pathlib import Path


def newest_step(run_dir: Path) -> int | None:
    """The newest step PRIME-RL's trainer finished broadcasting under `run_dir` (a `STABLE` marker), if any."""
    steps = [int(p.parent.name.removeprefix("step_")) for p in (run_dir / "broadcasts").glob("step_*/STABLE")]
    return max(steps, default=None)


def step_dirs(checkpoints: Path) -> list[Path]:
    """PRIME-RL's checkpoint step dirs under `checkpoints`, oldest first."""
    found = [p for p in checkpoints.glob("step_*") if p.name.removeprefix("step_").isdigit()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("step_")))


def drawn(step_dir: Path, env: str | None) -> int | None:
    """How many tasks the train source `env` had drawn when PRIME-RL wrote the checkpoint at `step_dir`; None while
    its orchestrator part is not there to read (being written, or its step dir being deleted)."""
    import torch

    path = step_dir / "orchestrator" / "progress.pt"
    try:
        with path.open("rb") as f:
            state = torch.load(f, weights_only=False)  # PRIME-RL's own pickle, loaded as its orchestrator loads it
    except (FileNotFoundError, EOFError):
        return None
    envs = state["train_source"]["envs"]
    if env is None:
        if len(envs) != 1:
            raise ValueError(
                f"realtime-sessions: checkpoint_env is unset and PRIME-RL's checkpoint {str(path)!r} holds "
                f"{len(envs)} train sources {sorted(envs)}; set checkpoint_env to this source's name"
            )
        (env,) = envs
    if env not in envs:
        raise ValueError(
            f"realtime-sessions: checkpoint_env = {env!r} is not a train source in PRIME-RL's checkpoint "
            f"{str(path)!r} (it has {sorted(envs)}); set it to this source's `name`"
        )
    return int(envs[env]["sampler"]["cursor"])


class Floor:
    """How many bundles the journal may forget: the oldest kept checkpoint's draw count (read once per oldest step
    dir), and no more than the runner has reported on (`handed` in its state.json, when the source has one)."""

    def __init__(self, checkpoints: Path, env: str | None):
        self.checkpoints = checkpoints
        self.env = env
        self.read: tuple[Path, int] | None = None

    def floor(self, state_file: Path | None) -> int:
        steps = step_dirs(self.checkpoints)
        if not steps:
            return 0
        if self.read is None or self.read[0] != steps[0]:
            cursor = drawn(steps[0], self.env)
            if cursor is None:
                return 0
            self.read = (steps[0], cursor)
        floor = self.read[1]
        if state_file is not None:
            floor = min(floor, int(json.loads(state_file.read_text()).get("handed", 0)) if state_file.exists() else 0)
        return floor


def check_pruned(journal: Path, pruned: int, checkpoints: Path | None, env: str | None) -> None:
    """Refuse a journal that forgot bundles 1..`pruned` when PRIME-RL has no checkpoint that discards them all: it
    would start over (or resume too early) and train the placeholders."""
    steps = [] if checkpoints is None else step_dirs(checkpoints)
    cursor = drawn(steps[0], env) if steps else None
    if not steps or (cursor is not None and cursor < pruned):
        found = "no checkpoint" if not steps else f"{steps[0].name}, which drew only {cursor}"
        raise RuntimeError(
            f"realtime-sessions: journal {str(journal)!r} forgot bundles 1..{pruned} (below PRIME-RL's oldest kept "
            f"checkpoint), but {str(checkpoints)!r} holds {found}: PRIME-RL would train placeholders for them. Resume "
            "PRIME-RL from the run this journal fed, or give a new run a new journal"
        )
