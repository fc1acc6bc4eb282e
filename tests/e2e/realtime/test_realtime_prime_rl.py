"""`composer-prime realtime --demo.prime-rl PATH`: the CPU demo trained by PRIME-RL 559b447's own `rl` (its launcher,
vLLM inference server, env server with the realtime-sessions source and the realtime-replay harness, orchestrator,
torchrun trainer with composer_loss, filesystem broadcasts), the demo's users serving from what the runner shipped.
Needs PRIME-RL's source (`PRIME_RL_SRC`, at 559b447 with deps/verifiers) and the smoke's venvs already built
(`COMPOSER_SMOKE_CACHE`, the `--cache` of an earlier smoke of this checkout); `.ci/smoke` runs it after its own smoke
run built both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SRC = os.environ.get("PRIME_RL_SRC")
CACHE = os.environ.get("COMPOSER_SMOKE_CACHE")
needs = pytest.mark.skipif(not (SRC and CACHE), reason="needs PRIME_RL_SRC and COMPOSER_SMOKE_CACHE (.ci/smoke)")


def weights(step_dir: Path) -> dict:
    from safetensors.torch import load_file

    state: dict = {}
    for path in sorted(step_dir.glob("*.safetensors")):
        state |= load_file(path)
    return state


def records(path: Path) -> list[dict]:
    """The spool file's records that parse (the demo also writes a malformed line)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


@needs
def test_the_cpu_demo_trains_through_prime_rl_and_ships_its_broadcasts(tmp_path):
    import torch

    state_dir, spool = tmp_path / "state", tmp_path / "spool"
    # The gate is opened: this test is about the path the weights take, not about how much 2 cycles learn.
    argv = [
        sys.executable,
        "-m",
        "composer_prime",
        "realtime",
        "--demo.sessions",
        "16",
        "--cadence.cycles",
        "2",
        "--cadence.interval-min",
        "0",
        "--gates.heldout-max-drop",
        "1.0",
        "--state-dir",
        str(state_dir),
        "--spool.dir",
        str(spool),
        "--demo.prime-rl",
        str(SRC),
        "--demo.cache",
        str(CACHE),
        "--demo.torch-index",
        "",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    state = json.loads((state_dir / "report.json").read_text())
    cycles = state["history"]
    assert [c["cycle"] for c in cycles] == [1, 2]
    # Each cycle judged a step PRIME-RL's trainer wrote after training (never its startup broadcast, step 0), newer
    # each time, scored by the demo's held-out evaluation, and shipped it.
    steps = [c["train"]["rl_step"] for c in cycles]
    assert 1 <= steps[0] < steps[1], steps
    assert all(c["heldout"] is not None and c["shipped"] for c in cycles), cycles
    assert state["version"] == 2 and state["version_steps"] == {"0": 0, "1": steps[0], "2": steps[1]}
    assert "Startup complete" in (state_dir / "rl.log").read_text()

    # The users served each window from the version the runner had shipped (a lagging replica's sessions excepted).
    assert [c["served_version"] for c in cycles] == [0, 1]
    served = [r["policy_version"] for r in records(spool / "window-000002.jsonl") if r.get("kind") == "session"]
    assert served and max(served) == 1

    # What shipped is PRIME-RL's trained broadcast, not the version-0 weights (both bf16: any change is a step).
    v0 = weights(state_dir / "policy-v0")
    for version in (1, 2):
        shipped = state_dir / "broadcasts" / f"step_{version}"
        assert (shipped / "STABLE").exists()
        got = weights(shipped)
        assert set(got) - {"lm_head.weight"} == set(v0) - {"lm_head.weight"}
        moved = [k for k in got if k in v0 and not torch.equal(got[k], v0[k])]
        assert len(moved) > len(v0) // 2, f"v{version} moved only {moved} of {sorted(v0)}"

    # Exactly once: every session the journal handed out is in one bundle, and PRIME-RL's orchestrator trained each
    # bundle in at most one step (its rollouts), the bundles of the judged steps among them.
    run_dir, journal = state_dir / "rl" / "realtime", state_dir / "rl" / "realtime-journal"
    handed = json.loads((journal / "state.json").read_text())["handed"]
    bundles = [json.loads((journal / "bundles" / f"{k:08d}.json").read_text()) for k in range(1, handed + 1)]
    ids = [s["session_id"] for b in bundles for s in b["sessions"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 16
    trained: list[str] = []
    for traces in sorted(run_dir.glob("rollouts/step_*/train/all/traces.jsonl")):
        for line in traces.read_text().splitlines():
            trained.append(json.loads(line)["task"]["data"]["name"])
    assert len(trained) == len(set(trained)), trained
    assert set(trained) <= {f"realtime-bundle-{k:08d}" for k in range(1, handed + 1)}
    assert len(trained) >= 2  # at least the bundles of the first judged step
    # Those episode logs keep no token stream once their step is judged (PRIME-RL's file monitor wrote them whole).
    judged = [p for p in run_dir.glob("rollouts/step_*") if int(p.name.removeprefix("step_")) <= steps[-1]]
    assert judged and all((p / "REDACTED").exists() for p in judged)
    assert not [p for p in judged for f in p.rglob("traces.jsonl") if "token_ids" in f.read_text()]
    assert not [line for line in result.stderr.splitlines() if line.startswith("realtime:")]
