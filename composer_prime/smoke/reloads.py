"""What the inference server serves after each weight reload: its prompt logprobs on a fixed probe prompt.

PRIME-RL's orchestrator makes the server load `broadcasts/step_N` (`POST /update_weights`); the smoke's server
answers `GET /weights` with the folder it loaded last and how many reloads it made. `Watcher.poll`, called by the smoke
twice a second while `rl` runs, sees each new reload, keeps the weights it loaded (the trainer removes old broadcast
folders), scores the probe prompt through the server (`probe.served_logprobs`), and keeps the answer only if no
other reload happened meanwhile. The report compares each record with the trainer's own forward of those weights
(`probe.py`, `served_vs_trainer_logprob_diff`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any


def snapshot(weight_dir: Path, dest: Path) -> bool:
    """Hard-link (else copy) the safetensors of `weight_dir` into `dest`: PRIME-RL's trainer removes a broadcast folder
    once it has written the next one. False when the folder is already gone."""
    files = sorted(weight_dir.glob("*.safetensors")) + sorted(weight_dir.glob("*.json"))
    if not files:
        return False
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for file in files:
            try:
                os.link(file, dest / file.name)
            except OSError:
                shutil.copy2(file, dest / file.name)
    except FileNotFoundError:
        shutil.rmtree(dest, ignore_errors=True)
        return False
    return True


class Watcher:
    """Records, per reload of the server at `url`, what it serves as `model` on the probe prompt `ids`
    (`probe.served_logprobs`), and keeps the weights it loaded under `keep/reload_<n>/` (relative weight folders are
    the server's: under `cwd`)."""

    def __init__(self, url: str, ids: list[int], model: str, cwd: Path, keep: Path) -> None:
        self.url, self.ids, self.model, self.cwd, self.keep = url, ids, model, cwd, keep
        self.seen = 0
        self.records: list[dict[str, Any]] = []
        """One per reload it caught: `reloads`, `weight_dir`, `kept`, `served` (per position: token id -> logprob)."""
        self.missed = 0
        """Reloads that happened between two polls or during a probe, whose weights were already gone, or whose
        probe failed (`errors`)."""
        self.errors: list[str] = []

    def poll(self) -> None:
        import httpx

        from composer_prime.smoke.probe import ProbeError, served_logprobs

        try:
            before = httpx.get(f"{self.url}/weights", timeout=5.0).json()
        except (httpx.HTTPError, ValueError):
            return  # the server is not up yet, or is gone
        if before["reloads"] <= self.seen:
            return
        kept = self.keep / f"reload_{before['reloads']}"
        missed = before["reloads"] - self.seen - 1
        self.seen = before["reloads"]
        if not snapshot(self.cwd / before["weights"], kept):
            self.missed += missed + 1
            return
        try:
            served = served_logprobs(self.url, self.model, self.ids)
            after = httpx.get(f"{self.url}/weights", timeout=5.0).json()
        except (ProbeError, httpx.HTTPError, ValueError) as err:
            self.errors.append(f"reload {before['reloads']}: {err}"[:300])
            self.missed += missed + 1
            shutil.rmtree(kept, ignore_errors=True)
            return
        if after != before:  # another reload landed while it was scored: not attributable
            self.missed += missed + 1
            shutil.rmtree(kept, ignore_errors=True)
            return
        self.missed += missed
        self.records.append(
            {
                "reloads": after["reloads"],
                "weight_dir": after["weights"],
                "kept": str(kept),
                "served": [{str(k): v for k, v in p.items()} for p in served],
            }
        )
