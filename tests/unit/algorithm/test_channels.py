"""Every channel live or the launch refuses: the hint mark, non-finite rewards, and the channel audit of each TOML.

The audit runs on merged TOML dicts here (composer-prime's own classes); tests/contract runs the same refusals inside
PRIME-RL's `cli(RLConfig)` parse and the hint mark through PRIME-RL's `TrainSink` and `compute_loss`.
"""

from __future__ import annotations

import copy
import math
import struct
from pathlib import Path

import pytest

from composer_agent.config import COMPACTION_ENV, ComposerAgentConfig
from composer_prime.algorithm.channels import loss_refusals, refusals, source_channels
from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.algorithm.credit import HINT_MARK, NonFiniteReward, group_advantages, token_advantages
from tests.support.traces import SYSTEM, TASK, assistant, build_trace, exchange, tool_call
from tests.unit.test_launch_configs import RECIPES, TOMLS, deep_merge, load


def hinted_trace(reward: float):
    """Nodes: a0 view -> error (2), a1 finish (4); node 2 carries a hint reference on its 3 sampled tokens."""
    trace = build_trace(
        [
            [
                SYSTEM,
                TASK,
                *exchange("a", "view", "Error: nope.py does not exist.", path="nope.py"),
                assistant("", tool_call("b", "finish")),
            ]
        ]
    )
    trace.nodes[2].reference_logprobs = [-0.2, -math.inf, -0.3]
    trace.record_reward("tests", reward)
    return trace


def test_float32_reads_the_hint_mark_as_exactly_zero():
    assert HINT_MARK > 0.0 and HINT_MARK != 0.0
    assert struct.unpack("f", struct.pack("f", HINT_MARK))[0] == 0.0


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_equal_reward_groups_mark_hint_tokens_only(reward):
    group = [hinted_trace(reward), hinted_trace(reward)]
    first, _ = group_advantages(group, ComposerAlgoConfig())
    # node 2: two finite strictly negative references marked, the -inf one (dropped by the loss) not; node 4 plain 0.
    assert first == [HINT_MARK, 0.0, HINT_MARK, 0.0, 0.0, 0.0]


def test_mixed_groups_keep_their_advantages_on_hint_tokens():
    passing, failing = hinted_trace(1.0), hinted_trace(0.0)
    assert group_advantages([passing, failing], ComposerAlgoConfig())[1] == [-0.5] * 6
    assert token_advantages(passing, 0.0, {}, 0.5)[:3] == [HINT_MARK, 0.0, HINT_MARK]


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_reward_is_refused_naming_the_task(bad):
    good, broken = hinted_trace(1.0), hinted_trace(0.0)
    broken.record_reward("tests", bad)
    with pytest.raises(NonFiniteReward, match=r"task idx=.*has reward (nan|inf).*Fix the environment's reward"):
        group_advantages([good, broken], ComposerAlgoConfig())


# --- the audit over the shipped launch configs ----------------------------------------------------------------------


def merged(*paths):
    config: dict = {}
    for path in paths:
        config = deep_merge(config, load(path))
    return config


RECIPE = {r.stem: r for r in RECIPES}


def channels(config):
    return {(c.source, c.algo, c.outcome, c.hints, c.replay) for c in source_channels(config["orchestrator"])}


@pytest.mark.parametrize("toml", TOMLS, ids=lambda p: p.stem)
def test_every_composer_toml_trains_all_three_channels_with_three_teachers(toml):
    # Composer's recipe: outcome, hints (HintConfig.enabled's default) and replay; recipes/no-hint.toml is the ablation
    config = merged(toml)
    found = source_channels(config["orchestrator"])
    assert {c.source for c in found} == {"feature-deletion", "swe-gym"}
    assert all(c.algo == "composer" and c.outcome and c.hints and c.replay and c.teachers == 3 for c in found)
    assert refusals(config["orchestrator"]) == []
    assert loss_refusals(config["orchestrator"], config["trainer"]["loss"]) == []
    unhinted = merged(toml, RECIPE["no-hint"])
    found = source_channels(unhinted["orchestrator"])
    assert all(c.outcome and not c.hints and c.replay and c.teachers == 3 for c in found)
    assert refusals(unhinted["orchestrator"]) == []
    assert loss_refusals(unhinted["orchestrator"], unhinted["trainer"]["loss"]) == []


@pytest.mark.parametrize("toml", TOMLS, ids=lambda p: p.stem)
@pytest.mark.parametrize(
    "recipe, changed",
    [
        ("no-hint", {"hints"}),
        ("no-replay", {"replay"}),
        ("rlvr-only", {"hints", "replay"}),
        ("no-compaction", set()),
    ],
)
def test_each_ablation_changes_exactly_the_channel_it_names(toml, recipe, changed):
    base = {c.source: c for c in source_channels(merged(toml)["orchestrator"])}
    ablated = merged(toml, RECIPE[recipe])
    for c in source_channels(ablated["orchestrator"]):
        differ = {f for f in ("outcome", "hints", "replay") if getattr(c, f) != getattr(base[c.source], f)}
        assert differ == changed, (recipe, c)
    assert refusals(ablated["orchestrator"]) == []


def test_no_compaction_changes_compaction_only(monkeypatch):
    for toml in TOMLS:
        base, ablated = merged(toml), merged(toml, RECIPE["no-compaction"])
        assert channels(base) == channels(ablated)
        assert ablated["orchestrator"]["train"] == base["orchestrator"]["train"]
        harnesses = [s["env"]["agent"]["harness"] for s in ablated["orchestrator"]["train"]["source"]]
        monkeypatch.setenv(COMPACTION_ENV, ablated["orchestrator"]["env_vars"][COMPACTION_ENV])
        assert [ComposerAgentConfig.model_validate(h).compaction.enabled for h in harnesses] == [False, False]


def test_baselines_train_what_they_name():
    toml = TOMLS[0]
    assert {c[1:] for c in channels(merged(toml, RECIPE["grpo-baseline"]))} == {("grpo", True, False, False)}
    opsd = source_channels(merged(toml, RECIPE["opsd-baseline"])["orchestrator"])
    assert {(c.algo, c.demonstration) for c in opsd} == {("opsd", "gold_patch")}


def test_replay_without_teachers_is_refused_naming_the_key_and_the_fix():
    config = merged(TOMLS[1])
    orchestrator = copy.deepcopy(config["orchestrator"])
    del orchestrator["train"]["source"][1]["env"]["taskset"]["task"]["teacher"]
    [problem] = refusals(orchestrator)
    assert "orchestrator.train.source[1] ('swe-gym')" in problem
    assert "[orchestrator.algo.replay] enabled = false" in problem and "docs/teachers.md" in problem
    orchestrator["algo"]["replay"] = {"enabled": False}
    assert refusals(orchestrator) == []


def test_a_gate_that_rejects_equal_reward_groups_is_refused_while_hints_are_on():
    orchestrator = copy.deepcopy(merged(TOMLS[0])["orchestrator"])
    source = orchestrator["train"]["source"][0]
    source["curriculum"] = {"gates": {"signal": {"type": "advantage_range", "reject_min": -0.01, "reject_max": 0.01}}}
    [problem] = refusals(orchestrator)
    assert "curriculum gate 'signal'" in problem and "reject_max below" in problem
    source["curriculum"]["gates"]["signal"] = {"type": "advantage_range"}  # PRIME-RL's default [0, 0] admits them
    assert refusals(orchestrator) == []
    orchestrator["algo"]["hints"] = {"enabled": False}
    source["curriculum"]["gates"]["signal"] = {"reject_min": -1.0, "reject_max": 1.0}
    assert refusals(orchestrator) == []


def test_the_hint_channel_needs_composer_loss():
    [problem] = loss_refusals(merged(TOMLS[0])["orchestrator"], {"type": "default"})
    assert "trainer.loss" in problem and "composer_prime.loss.composer_loss" in problem
    assert loss_refusals(merged(TOMLS[0], RECIPE["no-hint"])["orchestrator"], {"type": "default"}) == []


def test_the_docs_channel_audit_matches_the_code():
    doc = (TOMLS[0].parents[1] / "docs" / "prime-rl-integration.md").read_text()
    rows = {}
    for line in doc.split("## Channel audit", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and (cells[0].startswith("@") or cells[0].startswith("tomls/")):
            rows[cells[0]] = cells[1:]
    assert len(rows) == 1 + len(RECIPES)
    for toml in TOMLS:
        for key, expected in rows.items():
            paths = (
                [toml] if key.startswith("tomls/") else [toml, RECIPE[key.split("recipes/")[1].removesuffix(".toml")]]
            )
            for c in source_channels(merged(*paths)["orchestrator"]):
                algo = f"opsd on `{c.demonstration}`" if c.algo == "opsd" else c.algo
                got = [algo, "live" if c.outcome else "off", "live" if c.hints else "off"]
                got.append(f"live ({c.teachers})" if c.replay else "off")
                assert got == expected, (toml.stem, key, c)


def test_hints_or_teacher_replay_on_the_realtime_source_are_refused_with_the_reason():
    from composer_prime.cli import parse_config
    from composer_prime.realtime.cycle.config import RealtimeConfig

    toml = Path(__file__).resolve().parents[3] / "tomls" / "qwen3-32b-realtime.toml"
    orchestrator = parse_config(RealtimeConfig, ["@", str(toml)], "realtime").prime_rl.rl["orchestrator"]
    assert refusals(orchestrator) == []  # the cluster TOML turns both off
    for channel in ("hints", "replay"):
        on = copy.deepcopy(orchestrator)
        on["algo"][channel] = {"enabled": True}
        [problem] = refusals(on)
        assert "the realtime-sessions source replays logged sessions" in problem
        assert "[orchestrator.algo.hints] enabled = false" in problem and "docs/realtime.md" in problem


def test_teachers_nothing_reads_are_unread_and_a_weighted_judge_is_read():
    from composer_prime.algorithm.channels import TEACHERS_JUDGE, unread_teachers

    judge = {"id": TEACHERS_JUDGE, "teachers": [{"name": "t"}]}
    source = {"name": "s", "env": {"taskset": {"task": {"judges": [judge]}}}}
    orchestrator = {"algo": {"type": "grpo"}, "train": {"source": [source]}}
    assert unread_teachers(orchestrator) == [0]  # grpo reads no verdict of a weight-0 judge
    judge["weight"] = 0.5  # ... unless the judge weighs the reward
    assert unread_teachers(orchestrator) == []
    judge["weight"] = 0.0
    orchestrator["algo"] = {"type": "composer", "replay": {"enabled": False}, "hints": {"kinds": ["tool_error"]}}
    assert unread_teachers(orchestrator) == [0]
    orchestrator["algo"]["hints"]["kinds"] = ["teacher_hint", "tool_error"]  # teacher hints become targets
    assert unread_teachers(orchestrator) == []
    orchestrator["algo"]["hints"]["enabled"] = False
    assert unread_teachers(orchestrator) == [0]
    del source["env"]["taskset"]["task"]["judges"]  # no teachers: nothing to drop
    assert unread_teachers(orchestrator) == []
