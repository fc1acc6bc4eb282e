"""`composer-prime smoke @ recipes/<name>.toml`: each launch recipe becomes the smoke settings it means, what the
smoke cannot run is refused before anything starts, and the trainer's loss split adds up to the loss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from composer_prime.cli import UsageError
from composer_prime.smoke.command import parse
from composer_prime.smoke.trainer import Sample, TrainerConfig, train_step

REPO = Path(__file__).resolve().parents[2]
PROG = "composer-prime smoke"


def recipe(name: str) -> str:
    return str(REPO / "recipes" / f"{name}.toml")


def test_ablation_recipes_set_the_channels_the_launch_sets():
    # the three channels are on by default, as in the launch configs; recipes/no-hint.toml turns hints off
    default = parse([], PROG)
    assert default.algo.hints.enabled and default.algo.replay.enabled and default.compaction
    assert default.recipes == {}
    no_hint = parse(["@", recipe("no-hint")], PROG)
    assert not no_hint.algo.hints.enabled and no_hint.algo.replay.enabled
    assert no_hint.recipes[recipe("no-hint")].applied == ["orchestrator.algo.hints.enabled"]
    no_replay = parse([f"@{recipe('no-replay')}"], PROG)  # the `@file` spelling too
    assert no_replay.algo.hints.enabled and not no_replay.algo.replay.enabled
    rlvr = parse(["@", recipe("rlvr-only"), "--steps", "2"], PROG)
    assert not rlvr.algo.hints.enabled and not rlvr.algo.replay.enabled and rlvr.steps == 2
    # the train sources are restated whole in no-compaction: compaction applies, the rest is named as stood in for
    no_compaction = parse(["@", recipe("no-compaction")], PROG)
    assert not no_compaction.compaction and no_compaction.algo.replay.enabled
    note = no_compaction.recipes[recipe("no-compaction")]
    assert note.applied == ["orchestrator.train.source[*].env.agent.harness.compaction.enabled"]
    assert "teachers" in note.stand_ins[0]
    # overlays stack, later ones winning, as PRIME-RL merges them
    both = parse(["@", recipe("no-hint"), "@", recipe("no-compaction")], PROG)
    assert not both.algo.hints.enabled and not both.compaction and set(both.recipes) == {recipe("no-hint"),
                                                                                         recipe("no-compaction")}  # fmt: skip
    no_hint_no_replay = parse(["@", recipe("no-hint"), "@", recipe("no-replay")], PROG)
    assert not no_hint_no_replay.algo.hints.enabled and not no_hint_no_replay.algo.replay.enabled


@pytest.mark.parametrize(("name", "key"), [("grpo-baseline", "orchestrator.algo.type = 'grpo'"),
                                           ("opsd-baseline", "orchestrator.algo.type = 'opsd'")])  # fmt: skip
def test_baselines_the_smoke_cannot_run_are_refused_naming_the_key(name, key):
    with pytest.raises(UsageError) as err:
        parse(["@", recipe(name)], PROG)
    assert key in str(err.value) and f"uv run rl @ tomls/<config>.toml @ {recipe(name)}" in str(err.value)


def test_unknown_recipe_tables_and_other_losses_are_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[orchestrator.sampling]\ntemperature = 0.5\n")
    with pytest.raises(UsageError, match=r"orchestrator.sampling is not a recipe key the smoke applies"):
        parse(["@", str(bad)], PROG)
    bad.write_text('[trainer.loss]\nimport_path = "my.loss"\n')
    with pytest.raises(UsageError, match=r"trainer.loss.import_path = 'my.loss': the smoke's trainer runs"):
        parse(["@", str(bad)], PROG)
    bad.write_text("[trainer.loss.kwargs]\nhint_coeff = 0.1\n")
    with pytest.raises(UsageError, match=r"unknown key 'hint_coeff'"):
        parse(["@", str(bad)], PROG)
    bad.write_text("[orchestrator.algo.hints]\nenabled = 'maybe'\n")
    with pytest.raises(UsageError, match=r"enabled"):
        parse(["@", str(bad)], PROG)
    ok = tmp_path / "ok.toml"
    ok.write_text("[trainer.loss.kwargs]\nhint_coef = 0.2\n")
    assert parse(["@", str(ok)], PROG).loss == {"hint_coef": 0.2}


def test_smoke_shaped_files_and_section_files_pass_through(tmp_path):
    own = tmp_path / "smoke.toml"
    own.write_text("steps = 5\n[trainer]\nlr = 0.001\n")
    config = parse(["@", str(own)], PROG)
    assert config.steps == 5 and config.trainer.lr == 0.001 and config.recipes == {}
    section = tmp_path / "trainer.toml"
    section.write_text("lr = 0.002\n")
    assert parse(["--trainer", "@", str(section)], PROG).trainer.lr == 0.002


def test_the_command_refuses_a_baseline_recipe_and_bad_out_before_anything_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def smoke(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "composer_prime", "smoke", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO, env=env, check=False)  # fmt: skip

    result = smoke("@", recipe("grpo-baseline"), "--out", str(tmp_path / "a"))
    assert result.returncode == 2 and "orchestrator.algo.type = 'grpo'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "a").exists()
    result = smoke("--loss", '{"hint_coeff": 0.1}', "--out", str(tmp_path / "b"))
    assert result.returncode == 2 and "unknown key 'hint_coeff'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "b").exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = smoke("--out", str(blocker / "out"))
    assert result.returncode == 2 and "cannot create it" in result.stderr and "Traceback" not in result.stderr


def test_loss_channels_add_up_to_the_loss():
    """pg + hint + kl, each weighted by its sample's share of the rl tokens, is the loss; PRIME-RL's per-sample-mean
    metrics are not (two samples of different lengths and a non-zero kl_tau make sure of it)."""
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(16, 16)

        def forward(self, input_ids):
            return type("Out", (), {"logits": self.emb(input_ids) @ self.emb.weight.T})()

    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    short = Sample(token_ids=[1, 2, 3], mask=[False, True, True], logprobs=[0.0, -2.0, -3.0],
                   advantages=[0.0, 1.0, 1.0], ref_logprobs=None)  # fmt: skip
    long = Sample(token_ids=[4, 5, 6, 7, 8, 9], mask=[False, True, True, True, True, True],
                  logprobs=[0.0, -2.5, -2.0, -3.0, -2.0, -1.5], advantages=[0.0, -0.5, -0.5, -0.5, -0.5, -0.5],
                  ref_logprobs=[0.0, -1.0, 0.0, 0.0, -0.5, 0.0])  # fmt: skip
    out = train_step(model, optimizer, [short, long], {"hint_coef": 0.5, "kl_tau": 0.1}, TrainerConfig())
    assert out["loss/pg"] + out["loss/hint"] + out["loss/kl"] == pytest.approx(out["loss"], rel=1e-6, abs=1e-9)
    assert out["loss/hint"] != 0 and out["loss/kl"] > 0
    assert out["hint_share"] == pytest.approx(2 / 7)  # 2 hint tokens of 7 rl tokens
    plain = out["composer/rl/pg_loss"] + out["composer/hint/loss"] + out["composer/drift/log_ratio_sq"]
    assert plain != pytest.approx(out["loss"], rel=1e-3)
