"""A cluster cycle killed at its worst moments and rerun (`Runner.cluster_cycle`, `PrimeRL.start`): what ships under
a version is always the weights the cycle judged, and a step PRIME-RL rolled back is never shipped. PRIME-RL is a
folder of broadcasts here; `PrimeRL.start` runs a command that exits at once."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from composer_prime.realtime.cycle.cluster import PrimeRL
from composer_prime.realtime.cycle.config import RealtimeConfig
from composer_prime.realtime.cycle.runner import EvalError, Runner, State
from composer_prime.realtime.ingest.pruning import newest_step
from tests.support.tokenizer import tiny_tokenizer

EVAL = """import pathlib, sys
flag = pathlib.Path(sys.argv[2])
if flag.exists():
    flag.unlink()
    sys.exit(9)
print('{"score": 0.5}')
"""


class Killed(BaseException):
    """The runner killed (not an error it handles)."""


@pytest.fixture
def cluster(tmp_path):
    (tmp_path / "eval.py").write_text(EVAL)
    config = RealtimeConfig.model_validate(
        {
            "state_dir": str(tmp_path / "state"),
            "model_dir": str(tmp_path),
            "spool": {"dir": str(tmp_path / "spool"), "signal_window_s": 0},
            "pii": {"tokenizer": tiny_tokenizer()},
            "eval": {"command": [sys.executable, str(tmp_path / "eval.py"), "{weights}", str(tmp_path / "fail-once")]},
            "prime_rl": {
                "output_dir": str(tmp_path / "rl"),
                "command": [sys.executable, "-c", "pass"],
                "cwd": str(tmp_path),
                "rl": {
                    "orchestrator": {
                        "train": {
                            "source": [
                                {
                                    "name": "realtime",
                                    "group_size": 1,
                                    "env": {
                                        "taskset": {"id": "realtime-sessions", "bundle_size": 2},
                                        "agent": {"harness": {"id": "realtime-replay"}},
                                    },
                                }
                            ]
                        }
                    }
                },
            },
        }
    )
    run_dir = tmp_path / "rl" / "realtime"
    prime = SimpleNamespace(
        run_dir=run_dir, journal=tmp_path / "journal", wait_for_step=lambda after: newest_step(run_dir)
    )
    runner = Runner(config, log=lambda line: None)
    state = State(rl_step=2, step=2, cycle=4, version=1)
    runner._save(state)
    return SimpleNamespace(tmp=tmp_path, config=config, run_dir=run_dir, prime=prime, runner=runner, state=state)


def broadcast(run_dir: Path, step: int, weights: str) -> None:
    step_dir = run_dir / "broadcasts" / f"step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "model.safetensors").write_text(weights)
    (step_dir / "STABLE").touch()


def shipped(c, version: int) -> str:
    return (c.tmp / "state" / "broadcasts" / f"step_{version}" / "model.safetensors").read_text()


def test_a_step_rolled_back_while_its_cycle_was_down_is_judged_again_not_shipped(cluster):
    c = cluster
    broadcast(c.run_dir, 2, "step 2")
    broadcast(c.run_dir, 3, "step 3, later rolled back")
    (c.tmp / "fail-once").touch()
    with pytest.raises(EvalError):  # the evaluation fails: the run stops, its candidate copied
        c.runner.cluster_cycle(c.state, c.prime)
    # The rerun restarts PRIME-RL, which resumes from its checkpoint at step 2 and trains step 3 again.
    (c.run_dir / "checkpoints" / "step_2").mkdir(parents=True)
    prime = PrimeRL(c.config, lambda line: None)
    prime.start()
    prime.process.wait(60)
    assert prime.resumes_from == 2 and newest_step(c.run_dir) == 2
    broadcast(c.run_dir, 3, "step 3, retrained")
    state = c.runner.cluster_cycle(c.state, c.prime)
    assert state.version == 2 and shipped(c, 2) == "step 3, retrained"
    assert state.version_steps[2] == 3


def test_a_runner_killed_after_shipping_records_the_step_it_shipped_when_rerun(cluster):
    c = cluster
    broadcast(c.run_dir, 2, "step 2")
    broadcast(c.run_dir, 3, "step 3")
    save = c.runner._save

    def killed(state):
        c.runner._save = save
        raise Killed

    c.runner._save = killed
    with pytest.raises(Killed):  # shipped version 2, killed before its state was saved
        c.runner.cluster_cycle(c.state, c.prime)
    assert shipped(c, 2) == "step 3"
    broadcast(c.run_dir, 4, "step 4")  # PRIME-RL trained on while the runner was down
    state = c.runner.cluster_cycle(c.state, c.prime)
    # The rerun judges the step it had pinned: version 2 is step 3 in the state as on disk, and step 4 waits.
    assert (state.version, state.rl_step, state.version_steps[2]) == (2, 3, 3)
    assert shipped(c, 2) == "step 3"
