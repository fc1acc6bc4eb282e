"""A stand-in for `uv run rl @ rl.toml` on a CPU machine (PRIME-RL cannot run here): what the realtime runner relies
on, done the way PRIME-RL 559b447 does it, with no model.

- The orchestrator side: the train source's taskset is loaded from the TOML and iterated as `orchestrator/envs.py`
  does for an INFINITE taskset, asked again 0.1 s after a "not ready" as its dispatch loop does; on `[resume]` the
  latest checkpoint's draw count is drawn and discarded first, as `StandardSampler.load_state_dict` does.
- The trainer side: first the startup weights as broadcast `step_<start>` (`step_0` on a fresh run; PRIME-RL's
  `trainer/rl/train.py` broadcasts its startup policy as step `start - 1` before training), then one step per task drawn: the step's session ids appended to `<run dir>/trained.jsonl`, a
  broadcast `broadcasts/step_N/` (a weights file, then `STABLE`), and a checkpoint `checkpoints/step_N/` holding the
  draw count (checkpoint interval 1, so nothing is in flight at a checkpoint).

Usage: python prime_rl_standin.py RL_TOML [SECONDS_BETWEEN_STEPS]
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
import tomllib
from pathlib import Path

from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

from composer_prime.realtime.ingest.readiness import TaskNotReady


def main() -> None:
    rl = tomllib.loads(Path(sys.argv[1]).read_text())
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    run_dir = Path(rl["output_dir"]) / rl["run"]["name"]
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
    if "resume" in rl:
        assert checkpoints, "resume without a checkpoint"
        step, drawn = int(checkpoints[-1].name.split("_")[1]), json.loads((checkpoints[-1] / "cursor.json").read_text())
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # `clean`, or a fresh run dir
        step, drawn = 0, 0
    run_dir.mkdir(parents=True, exist_ok=True)
    [source] = rl["orchestrator"]["train"]["source"]
    tasks = iter(load_taskset(resolve_env_config(source["env"]).taskset))
    for _ in range(drawn):
        next(tasks)
    broadcast(run_dir, step, "startup weights")
    print(f"stand-in: run {run_dir}, resumed at step {step} after {drawn} tasks", flush=True)
    busy = stop = False

    def on_term(*_) -> None:  # a step is trained and checkpointed whole, as one unit
        nonlocal stop
        stop = True
        if not busy:
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    while True:
        try:
            task = next(tasks)
        except TaskNotReady:  # PRIME-RL's TrainSource answers "source empty"; its dispatch loop comes round again
            time.sleep(0.1)
            continue
        busy = True
        drawn += 1
        step += 1
        with (run_dir / "trained.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, "sessions": [e.session_id for e in task.data.sessions]}) + "\n")
        broadcast(run_dir, step, f"weights after step {step}")
        checkpoint = run_dir / "checkpoints" / f"step_{step}"
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / "cursor.json").write_text(json.dumps(drawn))
        print(f"stand-in: step {step} trained bundle {task.data.bundle}", flush=True)
        busy = False
        if stop:
            raise SystemExit(0)
        time.sleep(pause)


def broadcast(run_dir: Path, step: int, weights: str) -> None:
    folder = run_dir / "broadcasts" / f"step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights.encode())
    (folder / "STABLE").touch()


if __name__ == "__main__":
    main()
