"""The smoke's inputs, made in the PRIME-RL venv before `rl` starts: the tasks and the warm-started tiny policy.

1. Mine Feature Deletion tasks from the bundled repository (`composer-prime mine-features`) and keep the first
   `tasks` function-level ones in `tasks.jsonl` (what `tomls/cpu-smoke.toml`'s train taskset reads); up to
   `EVAL_TASKS` of the others, held out of training (function-level first, then module-level), go to
   `eval-tasks.jsonl` (its `[orchestrator.eval]` taskset).
2. Build the tiny Qwen3-architecture policy (`policy.py`: tokenizer trained on the run's text, random weights) and
   warm-start it on demonstrations of those tasks (`warmstart.py`), so its first groups have reward variance (a
   random policy emits no tool calls: every reward 0, and PRIME-RL's orchestrator stops after 10 empty batches).
   It is saved as an HF model dir, `model/` (what `[model] name` reads), with the token ids of the probe prompt
   the smoke scores after every reload (`probe.json`, `probe.py`).

Run as `python -m composer_prime.smoke.prepare SETTINGS.json WORK_DIR`; prints one JSON line of figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.local.policy import PolicyShape
from composer_prime.smoke.probe import probe_ids
from composer_prime.smoke.warmstart import WarmStartConfig

EVAL_TASKS = 2
"""Held-out tasks in the eval set: each eval runs each once (`[orchestrator.eval] group_size` 1)."""


class PrepareConfig(BaseModel):
    """What the inputs are made from (a part of the smoke's config)."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(2, ge=1, le=4)
    seed: int = 0
    policy: PolicyShape = PolicyShape()
    warm_start: WarmStartConfig = WarmStartConfig()


def mine(work: Path, count: int) -> list[Any]:
    """Mine the bundled repository into `work/tasks.jsonl`, keeping the first `count` function-level tasks, and
    `work/eval-tasks.jsonl`, up to `EVAL_TASKS` of the rest (never one that trains)."""
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    from composer_prime.atomic import write_atomic
    from composer_prime.smoke import TOYREPO

    mined = work / "mined.jsonl"
    argv = [sys.executable, "-m", "composer_prime", "mine-features", "--repo", str(TOYREPO), "--out", str(mined)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"mine-features failed ({done.returncode}):\n{done.stderr[-2000:]}")
    lines = [line for line in mined.read_text().splitlines() if line.strip()]
    env = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(mined)}})
    kinds = [t.data.mined.feature.kind for t in load_taskset(env.taskset)]
    kept = [k for k, kind in enumerate(kinds) if kind == "function"][:count]
    held_out = sorted((k for k in range(len(lines)) if k not in kept), key=lambda k: kinds[k] != "function")
    write_atomic(work / "tasks.jsonl", "".join(lines[k] + "\n" for k in kept))
    write_atomic(work / "eval-tasks.jsonl", "".join(lines[k] + "\n" for k in held_out[:EVAL_TASKS]))
    env = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(work / "tasks.jsonl")}})
    return list(load_taskset(env.taskset))


def build_policy(config: PrepareConfig, tasks: list[Any], model_dir: Path) -> dict[str, Any]:
    import torch
    from renderers import Qwen3RendererConfig, create_renderer

    from composer_agent import ComposerAgentConfig, ComposerAgentHarness
    from composer_agent.tools import tool_specs
    from composer_prime.local import policy
    from composer_prime.smoke import TOYREPO, warmstart

    torch.manual_seed(config.seed)
    harness = ComposerAgentHarness(ComposerAgentConfig())  # every tool offered, as the launch TOMLs offer them
    specs = tool_specs()
    branches = [warmstart.wire(b, specs) for t in tasks for b in warmstart.demonstration(t, harness, specs, TOYREPO)]
    files = [p.read_text() for p in sorted(TOYREPO.rglob("*.py"))]
    corpus = warmstart.corpus([m for m, _ in branches], branches[0][1], files)
    tokenizer = policy.build_tokenizer(corpus, config.policy.vocab_size)
    renderer = create_renderer(tokenizer, Qwen3RendererConfig(enable_thinking=False))
    model = policy.build_model(tokenizer, config.policy)

    def progress(step: int, loss: float) -> None:
        print(json.dumps({"progress": f"warm start: step {step}, loss {loss:.3f}"}), flush=True)

    stats = warmstart.warm_start(model, renderer, branches, config.warm_start, progress=progress)
    policy.save_policy(model, tokenizer, model_dir)
    (model_dir / "probe.json").write_text(json.dumps({"token_ids": probe_ids(model_dir)}))
    return stats


def main(argv: list[str]) -> int:
    settings, work = Path(argv[0]), Path(argv[1])
    config = PrepareConfig.model_validate_json(settings.read_text())
    tasks = mine(work, config.tasks)
    stats = build_policy(config, tasks, work / "model")
    print(json.dumps({"tasks": [t.data.name for t in tasks], "warm_start": stats}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
