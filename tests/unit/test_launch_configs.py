"""Every shipped TOML (tomls/*.toml, recipes/*.toml) parses and its composer blocks validate, without PRIME-RL.

PRIME-RL's own `cli(RLConfig)` parse of each TOML alone and with each recipe is in tests/contract (it needs a PRIME-RL
checkout); here every block composer-prime owns is validated with the config class that will read it, after the same
deep merge PRIME-RL's config loader applies to `@ base.toml @ overlay.toml` (tables merge key by key, anything else,
arrays of tables included, is replaced).
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
from feature_deletion.taskset import FeatureDeletionConfig
from swe_gym.taskset import SWEGymTasksetConfig

from composer_agent.config import COMPACTION_ENV, ComposerAgentConfig
from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.loss_config import ComposerLossConfig

ROOT = Path(__file__).resolve().parents[2]
TOMLS = sorted((ROOT / "tomls").glob("*-composer.toml"))  # PRIME-RL launch TOMLs (realtime: test_realtime_config)
RECIPES = sorted((ROOT / "recipes").glob("*.toml"))
TASKSETS = {"feature-deletion": FeatureDeletionConfig, "swe-gym": SWEGymTasksetConfig}


def deep_merge(base: dict, override: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(merged.get(key), dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load(path: Path) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def test_shipped_tomls_exist():
    assert [p.name for p in TOMLS] == [
        "qwen3-0.6b-composer.toml",
        "qwen3-30b-a3b-composer.toml",
        "qwen3-32b-composer.toml",
        "qwen3-4b-composer.toml",
    ]
    names = {p.stem for p in RECIPES}
    assert {"rlvr-only", "no-hint", "no-replay", "no-compaction", "grpo-baseline", "opsd-baseline"} <= names


@pytest.mark.parametrize("path", TOMLS + RECIPES, ids=lambda p: p.name)
def test_each_toml_opens_with_hypothesis_change_and_launch(path):
    head = path.read_text().split("\n\n", 1)[0]
    assert all(line.startswith("#") for line in head.splitlines()), f"{path.name} must open with a comment block"
    for word in ("Hypothesis", "Launch"):
        assert word in head, f"{path.name}'s opening comment must state the {word.lower()}"
    launch = next(line for line in head.splitlines() if "uv run rl @" in line)
    assert path.name in launch


@pytest.mark.parametrize(
    "combo",
    [[t] for t in TOMLS] + [[t, r] for t in TOMLS for r in RECIPES],
    ids=lambda c: "+".join(p.stem for p in c),
)
def test_composer_blocks_validate_after_the_overlay_merge(combo):
    config: dict = {}
    for path in combo:
        config = deep_merge(config, load(path))
    orchestrator, trainer = config["orchestrator"], config["trainer"]
    algo = orchestrator["algo"]
    if algo["type"] == "composer":
        ComposerAlgoConfig.model_validate(algo)
    else:
        assert set(algo) <= {"type", "demo_key", "template", "length_penalty"}, "a baseline must not keep composer keys"
    loss = trainer["loss"]
    assert loss["type"] == "custom"
    if loss["import_path"] == "composer_prime.loss.composer_loss":
        ComposerLossConfig.model_validate(loss.get("kwargs", {}))
    else:
        assert loss["import_path"] == "composer_prime.loss.prime_rl_default_loss" and not loss.get("kwargs")
    sources = orchestrator["train"]["source"] + orchestrator.get("eval", {}).get("source", [])
    assert {s["env"]["taskset"]["id"] for s in sources} == {"feature-deletion", "swe-gym"}
    for source in sources:
        env = source["env"]
        TASKSETS[env["taskset"]["id"]].model_validate(env["taskset"])
        ComposerAgentConfig.model_validate(env["agent"]["harness"])


def test_no_compaction_turns_compaction_off_in_every_source_without_restating_them(monkeypatch):
    recipe = load(ROOT / "recipes" / "no-compaction.toml")
    assert recipe == {"orchestrator": {"env_vars": {COMPACTION_ENV: "off"}}}
    for path in TOMLS:
        base = load(path)
        ablated = deep_merge(base, recipe)
        assert ablated["orchestrator"]["train"] == base["orchestrator"]["train"]
        harnesses = [s["env"]["agent"]["harness"] for s in base["orchestrator"]["train"]["source"]]
        assert all(ComposerAgentConfig.model_validate(h).compaction.enabled for h in harnesses)
        # what an env server started with the overlay's env_vars builds
        monkeypatch.setenv(COMPACTION_ENV, ablated["orchestrator"]["env_vars"][COMPACTION_ENV])
        assert not any(ComposerAgentConfig.model_validate(h).compaction.enabled for h in harnesses)
        monkeypatch.delenv(COMPACTION_ENV)


def test_a_bad_compaction_switch_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv(COMPACTION_ENV, "false")
    with pytest.raises(
        ValueError, match=r"COMPOSER_AGENT_COMPACTION='false' is not a compaction switch: set it to 'off'"
    ):
        ComposerAgentConfig.model_validate({})
    monkeypatch.setenv(COMPACTION_ENV, "ON")
    assert ComposerAgentConfig.model_validate({"compaction": {"enabled": False}}).compaction.enabled is False


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: p.name)
def test_every_composer_toml_runs_all_three_channels(path):
    # Hints are on by the code default, not by a key: a `hints` key would follow grpo-baseline / opsd-baseline into
    # PRIME-RL's grpo and opsd configs, which refuse it (the overlay test above checks no baseline keeps one).
    algo = ComposerAlgoConfig.model_validate(load(path)["orchestrator"]["algo"])
    assert algo.outcome.coef > 0 and algo.hints.enabled and algo.replay.enabled
    no_hint = deep_merge(load(path), load(ROOT / "recipes" / "no-hint.toml"))["orchestrator"]["algo"]
    no_hint = ComposerAlgoConfig.model_validate(no_hint)
    assert not no_hint.hints.enabled and no_hint.replay.enabled and no_hint.outcome.coef > 0


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: p.name)
def test_every_composer_toml_trains_feature_deletion_in_per_task_images(path):
    """The subprocess runtime cannot keep a box clean (docs/grading.md): a launch trains Feature Deletion on an image
    runtime, from a mine-corpus corpus whose rows name their images, and grades in a grader box."""
    sources = {s["name"]: s["env"] for s in load(path)["orchestrator"]["train"]["source"]}
    env = sources["feature-deletion"]
    assert env["agent"]["runtime"]["type"] in ("docker", "podman")
    assert env["taskset"]["task"]["require_grader_box"] is True
    assert not env["taskset"]["tasks"].endswith(".jsonl")  # a corpus folder (mine-corpus), not a host-mined file


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: p.name)
def test_router_replay_is_on_exactly_for_the_moe_model(path):
    config = load(path)
    moe = config["model"]["name"] == "Qwen/Qwen3-30B-A3B"
    trainer, vllm = config["trainer"], config.get("inference", {}).get("vllm", {})
    assert trainer.get("enable_router_replay", False) is moe
    assert vllm.get("enable_return_routed_experts", False) is moe
    if moe:  # PRIME-RL replays routing only in its custom MoE implementations
        assert trainer["model"]["impl"] == "custom" and trainer["model"]["ep"] == 8


def _flat(value, prefix=""):
    """Dotted keys of a TOML table; arrays of tables by index."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return {k: v for i, sub in enumerate(value) for k, v in _flat(sub, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


CPU_SMOKE_DIFFERS = (
    # scale
    "max_steps",
    "seq_len",
    "output_dir",
    "model.name",
    "orchestrator.batch_size",
    "orchestrator.group_size",
    "orchestrator.concurrency.",
    "orchestrator.train.sampling.",
    "trainer.optim.lr",
    "ckpt.",
    "monitors.wandb.",
    "orchestrator.eval.",
    "orchestrator.train.source.1.",  # swe-gym's docker images and the eval set: not on a laptop
    "orchestrator.train.source.0.ratio",
    "orchestrator.train.source.0.env.taskset.tasks",
    "orchestrator.train.source.0.env.agent.harness.max_turns",
    "orchestrator.train.source.0.env.agent.harness.disabled_tools",
    "orchestrator.train.source.0.env.taskset.task.teacher.cache_dir",
    "orchestrator.train.source.0.env.taskset.task.teacher.budget.ledger",
    # isolation: the smoke's tasks run on the laptop's host (subprocess); a launch runs each task in its row's image
    "orchestrator.train.source.0.env.agent.runtime.type",
    "orchestrator.train.source.0.env.taskset.task.require_grader_box",
    "orchestrator.train.source.0.env.taskset.task.expected_side",  # a laptop has no root for the jail
    # CPU settings
    "inference.",
    "trainer.model.",
    "orchestrator.train.source.0.serve.",
    "orchestrator.renderer.",
)


def test_cpu_smoke_differs_from_the_0_6b_launch_only_in_scale_and_cpu_settings():
    smoke = _flat(tomllib.loads((ROOT / "tomls" / "cpu-smoke.toml").read_text()))
    launch = _flat(tomllib.loads((ROOT / "tomls" / "qwen3-0.6b-composer.toml").read_text()))
    differing = {k for k in smoke.keys() | launch.keys() if smoke.get(k) != launch.get(k)}
    unexplained = {k for k in differing if not k.startswith(CPU_SMOKE_DIFFERS)}
    assert unexplained == set()
    # the recipe itself is the same: loss, algorithm, harness, compaction, teachers
    for key in (
        "trainer.loss.type",
        "trainer.loss.import_path",
        "orchestrator.algo.type",
        "weight_broadcast.type",
        "orchestrator.train.source.0.env.agent.harness.compaction.enabled",
        "orchestrator.train.source.0.env.taskset.task.teacher.teachers.2.base_url_var",
    ):
        assert smoke[key] == launch[key], key


def test_cpu_smoke_rehearses_the_launchs_eval_checkpoints_and_tools():
    smoke = tomllib.loads((ROOT / "tomls" / "cpu-smoke.toml").read_text())
    launch = tomllib.loads((ROOT / "tomls" / "qwen3-0.6b-composer.toml").read_text())
    assert smoke["ckpt"]["interval"] == 1 and smoke["ckpt"]["keep_last"] == launch["ckpt"]["keep_last"]
    [source] = smoke["orchestrator"]["eval"]["source"]
    assert source["env"]["taskset"]["tasks"] == "eval-tasks.jsonl"  # held out of `tasks.jsonl` (prepare.py)
    train = smoke["orchestrator"]["train"]["source"][0]
    assert source["env"]["agent"] == train["env"]["agent"]  # the same harness and runtime
    assert "disabled_tools" not in train["env"]["agent"]["harness"]  # every tool, as the launch offers them
    assert round(smoke["trainer"]["optim"]["lr"] / launch["trainer"]["optim"]["lr"]) == 25  # bench/smoke_lr.py
