"""Every channel live at launch, through PRIME-RL 559b447's own code: the parse-time refusals in `cli(RLConfig)`, and
hint tokens of equal-reward groups through PRIME-RL's zero-advantage filter (`train_sink._prune_zero_advantages`, what
`TrainSink.process_batch` runs with `filter_zero_advantages = true`) into `compute_loss`."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
import torch

from tests.contract.conftest import run_with_prime_rl
from tests.contract.seam.test_algorithm_contract import ROOT, TOMLS, Renderer, Scorer, composer_loss_on, episode_trace

PARSE = (
    "import sys\nfrom prime_rl.configs.rl import RLConfig\nfrom prime_rl.utils.config import cli\n"
    "cli(RLConfig, args=[x for f in sys.argv[1:] for x in ('@', f)])\n"
)


def parse(*files) -> subprocess.CompletedProcess:
    return run_with_prime_rl(["-c", PARSE, *map(str, files)], cwd=ROOT, timeout=300)


def test_a_launch_whose_replay_has_no_teachers_is_refused_by_prime_rls_parse(tmp_path, verifiers_snapshot):
    # An overlay restating the train sources without their teacher tables (arrays of tables are replaced whole).
    overlay = tmp_path / "no-teachers.toml"
    overlay.write_text(
        '[[orchestrator.train.source]]\nname = "feature-deletion"\n[orchestrator.train.source.env.taskset]\n'
        'id = "feature-deletion"\ntasks = "/data/x.jsonl"\n'
        '[orchestrator.train.source.env.agent.harness]\nid = "composer-agent"\n'
    )
    result = parse(TOMLS[0], overlay)
    assert result.returncode != 0
    assert "orchestrator.train.source[0] ('feature-deletion')" in result.stderr
    assert "[orchestrator.algo.replay] enabled = false" in result.stderr
    replay_off = tmp_path / "replay-off.toml"
    replay_off.write_text("[orchestrator.algo.replay]\nenabled = false\n")
    assert parse(TOMLS[0], overlay, replay_off).returncode == 0, parse(TOMLS[0], overlay, replay_off).stderr[-2000:]


JUDGES = PARSE.replace("cli(RLConfig,", "config = cli(RLConfig,") + (
    "import json\ntask = config.orchestrator.train.source[0].env.taskset.task\n"
    "print(json.dumps({'judges': [j.id for j in task.judges], 'teacher': task.teacher is not None}))\n"
)


@pytest.mark.parametrize(
    "recipe, teachers",
    [
        (None, True),
        ("no-hint", True),
        ("no-replay", True),
        ("rlvr-only", False),
        ("grpo-baseline", False),
        ("opsd-baseline", False),
    ],
)
def test_prime_rls_parse_drops_the_teachers_no_channel_reads(recipe, teachers, verifiers_snapshot):
    # The launcher writes every env server's config from the parsed source: a judge dropped here is never queried.
    files = [TOMLS[0]] + ([ROOT / "recipes" / f"{recipe}.toml"] if recipe else [])
    done = run_with_prime_rl(["-c", JUDGES, *map(str, files)], cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert ("composer-teachers" in parsed["judges"]) == teachers and parsed["teacher"] == teachers, parsed


def test_the_hint_channel_needs_composer_loss_in_prime_rls_parse(tmp_path, verifiers_snapshot):
    overlay = tmp_path / "default-loss.toml"
    overlay.write_text('[trainer.loss]\nimport_path = "composer_prime.loss.prime_rl_default_loss"\n')
    # the launch configs run hints: the default loss is refused until recipes/no-hint.toml turns them off
    result = parse(TOMLS[0], overlay)
    assert result.returncode != 0 and "ignores the hint reference stream" in result.stderr
    assert parse(TOMLS[0], ROOT / "recipes" / "no-hint.toml", overlay).returncode == 0


@pytest.mark.parametrize("reward", [0.0, 1.0], ids=["all-fail", "all-pass"])
def test_equal_reward_groups_keep_their_hint_gradient_through_the_filter(reward, verifiers_snapshot):
    import verifiers.v1 as vf
    from prime_rl.configs.algorithm import AlgoConfig
    from prime_rl.orchestrator.algo import build_algorithm
    from prime_rl.orchestrator.train_sink import _prune_zero_advantages
    from prime_rl.orchestrator.trajectories import trace_to_samples
    from pydantic import TypeAdapter

    algorithm = build_algorithm(
        TypeAdapter(AlgoConfig).validate_python({"type": "composer", "hints": {"enabled": True}}), Scorer()
    )
    algorithm.renderer = Renderer()
    traces = [episode_trace(reward, teacher=False) for _ in range(2)]
    episodes = [vf.Episode(task=t.task, traces=[t], ok=True) for t in traces]

    async def orchestrate():
        for episode in episodes:
            await algorithm.finalize_episode(episode)
        await algorithm.finalize_group(episodes)

    asyncio.run(orchestrate())
    samples = [s for t in traces for s in trace_to_samples(t)]
    kept = [s for s in samples if _prune_zero_advantages(s)]
    # Per trace: branch 0 carries the hint target (node 2) and is kept; branch 1 has no hint and no signal: pruned.
    assert len(samples) == 4 and len(kept) == 2
    trainer, loss = composer_loss_on(kept, torch.float32, rl_weights=True)  # float32: the trainer's dtype
    loss.backward()
    for sample, logprobs in zip(kept, trainer, strict=True):
        hint = [i for i, r in enumerate(sample.ref_logprobs) if r < 0]
        assert len(hint) == 3 and all(sample.rl_weights[i] == 1.0 for i in hint)
        assert torch.tensor(sample.advantages, dtype=torch.float32).abs().max().item() == 0.0  # no PG signal
        grad = logprobs.grad.tolist()
        assert all(grad[i] < 0 for i in hint)  # ref (-0.2) > sampled (-0.5): pulled up, on the target only
        assert all(g == 0.0 for i, g in enumerate(grad) if i not in hint)


DRY_RUN = """
import json, sys
from pathlib import Path
from prime_rl.entrypoints.rl import main
out, combos, base = [], json.loads(sys.argv[1]), Path(sys.argv[2])
for i, files in enumerate(combos):
    target = base / str(i)
    sys.argv = ["rl", *[x for f in files for x in ("@", f)], "--dry-run", "--output-dir", str(target)]
    main()
    [run] = [p for p in target.iterdir() if (p / "configs").is_dir()]
    teachers = {}
    for env in sorted((run / "configs" / "envs" / "train").glob("*.json")):
        task = json.loads(env.read_text())["env"]["taskset"]["task"]
        judges = [j for j in task.get("judges") or [] if j.get("id") == "composer-teachers"]
        teachers[env.stem] = [t["name"] for j in judges for t in j["teachers"]]
    sbatch = run / "rl.sbatch"
    orch = [l for l in sbatch.read_text().splitlines() if l.startswith("ORCH_PROCID=")] if sbatch.exists() else []
    out.append({"files": files, "teachers": teachers, "orch": orch})
print(json.dumps(out))
"""


def test_rl_dry_run_of_every_toml_and_recipe_pair(tmp_path, verifiers_snapshot):
    # PRIME-RL's own launcher (`uv run rl ... --dry-run`): parse, write the sub-configs and, for slurm, the sbatch.
    from tests.contract.seam.test_algorithm_contract import RECIPES

    combos = [[str(t)] for t in TOMLS] + [[str(t), str(r)] for t in TOMLS for r in RECIPES]
    result = run_with_prime_rl(["-c", DRY_RUN, json.dumps(combos), str(tmp_path)], cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(runs) == len(combos)
    for run in runs:
        names = {"gpt-4.1-mini", "gemini-2.5-flash", "deepseek-v3"}
        # the env servers get the teachers where a channel reads them, and none where nothing does
        unread = any(run["files"][-1].endswith(f"{r}.toml") for r in ("grpo-baseline", "opsd-baseline", "rlvr-only"))
        assert all(set(t) == (set() if unread else names) for t in run["teachers"].values()), run
        if "qwen3-32b" in run["files"][0]:
            # The 32B TOML says the orchestrator and env servers run on the first trainer node.
            assert run["orch"] == ["ORCH_PROCID=$NUM_INFER_NODES"], run
