"""A smoke killed after step 1 resumes to the end with PRIME-RL's own `[resume]` (`composer-prime smoke --resume`):
the resumed trainer and orchestrator say they loaded the checkpoint, the trainer's first broadcast holds exactly the
weights the killed trainer had trained to it (not the start model's), the steps go on from it and no step is trained
twice. Needs what `test_smoke_prime_rl.py` needs (`PRIME_RL_SRC`, `COMPOSER_SMOKE_CACHE`) and
`COMPOSER_PRIME_RESUME_SMOKE=1`: two PRIME-RL starts take about 5 min of both cores at load 2, 12 at load 10."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from composer_prime.smoke.outdir import complete_checkpoints, run_dir
from tests.e2e.smoke.test_smoke_prime_rl import CACHE, needs, ours, smoke

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("COMPOSER_PRIME_RESUME_SMOKE") != "1",
        reason="a kill and a resume start PRIME-RL twice, about 6-7 min of both cores: COMPOSER_PRIME_RESUME_SMOKE=1 "
        "runs it (.ci/smoke sets it)",
    ),
]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a model folder's safetensors files, in bf16 (what PRIME-RL's filesystem broadcast writes)."""
    from safetensors.torch import load_file

    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found |= {k: v.bfloat16() for k, v in load_file(file).items()}
    assert found, f"no weights in {folder}"
    return found


def train_steps(metrics: Path, after_line: int = 0) -> list[int]:
    """Steps of the trainer's rows in `metrics.jsonl` (they carry `loss/mean`), from line `after_line` on."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()[after_line:] if line.strip()]
    return sorted(int(row["step"]) for row in rows if "loss/mean" in row)


@needs
@pytest.mark.timeout(3600)  # two PRIME-RL starts: 5 min at load 2, 20 and more on a busy machine
def test_a_run_killed_after_step_1_resumes_from_its_checkpoint_to_the_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = smoke(out, str(CACHE), "--steps", "3")
    lines: list[str] = []
    assert process.stdout is not None
    threading.Thread(target=lines.extend, args=(process.stdout,), daemon=True).start()
    deadline = time.monotonic() + 1200
    while True:  # kill once a checkpoint stands whole (trainer and orchestrator)
        run = run_dir(out / "work")
        if run is not None and complete_checkpoints(run):
            break
        assert process.poll() is None, "".join(lines[-40:])
        assert time.monotonic() < deadline, "no whole checkpoint in 20 min:\n" + "".join(lines[-40:])
        time.sleep(0.5)
    os.kill(process.pid, signal.SIGTERM)  # the smoke this test started, by its PID
    assert process.wait(timeout=30) == 130, "".join(lines[-40:])
    time.sleep(0.5)
    assert ours(tmp_path) == []
    kept = complete_checkpoints(run)[-1]
    assert 1 <= kept < 3
    metrics = run / "metrics.jsonl"
    before = len(metrics.read_text().splitlines())
    assert max(train_steps(metrics), default=0) < 3  # killed before the end
    # The killed trainer's weights at the checkpoint, as it broadcast them; the resumed trainer broadcasts what it
    # loaded before its first step, into a folder it must write anew.
    trained = weights(run / "broadcasts" / f"step_{kept}")
    shutil.rmtree(run / "broadcasts" / f"step_{kept}")

    resumed = smoke(out, str(CACHE), "--steps", "3", "--resume")
    output, _ = resumed.communicate(timeout=1500)
    assert resumed.returncode == 0, output[-3000:]
    assert f"from its checkpoint of step {kept}" in output
    assert run_dir(out / "work") == run  # the same run folder, continued
    assert train_steps(metrics, before) == list(range(kept + 1, 4))  # on from the checkpoint, each step once
    report = json.loads((out / "report.json").read_text())
    assert [s["step"] for s in report["steps"]] == [1.0, 2.0, 3.0]
    said = report["resumed"]
    assert said["from_step"] == kept
    assert said["orchestrator"] == f"Resuming orchestrator from checkpoint step {kept}"
    assert said["trainer"] == f"Resuming training from checkpoint step {kept}"
    assert said["trainer_progress"].startswith(f"Starting from step {kept + 1} (")
    loaded = weights(run / "broadcasts" / f"step_{kept}")
    start = weights(out / "work" / "model")
    assert loaded.keys() == trained.keys() and all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert any(not torch.equal(start[k].bfloat16(), trained[k]) for k in trained if k in start)  # it trained
    assert 3 in complete_checkpoints(run)  # the final checkpoint
    assert report["served_vs_trainer_logprob_diff"] is not None and report["served_vs_trainer_logprob_diff"] < 0.01
