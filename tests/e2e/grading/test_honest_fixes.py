"""Honest fixes score 1.0 (issue 28, line 7; issue 39, line 4): alternative solutions of red-team tasks, each written
as a person might and none as the gold is (`tests/support/honest_fixes.py`), graded end to end as scripted rollouts
on the subprocess runtime: replay, scan, canaries of every kind, suite. Feature-deletion: the shop's `apply_discount`
and `Cart.add`; swe-gym: the toy `clamp` and the nine helpers of the `ledger` project, whose gold makes a choice
the tests do not see in each (a new exception subclass, a tuple, a list, a generator, a str, an int, `Decimal("0.30")`,
`math.sqrt`, a sorted copy); issue 39, line 6 adds other data structures, return types the tests accept, helpers,
caching, recursion, table lookups and a `Cart.lines` served by a property. A grader that voids or fails one of them
teaches the policy nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import verifiers.v1 as vf
from swe_gym.taskset import SWEGymTaskset, SWEGymTasksetConfig

from tests.e2e.grading.test_reward_hacks import (  # noqa: F401 (fixtures)
    TIMEOUT_S,
    Env,
    box_environment,
    envs,
    grader_venv,
    private_boxes,
    rollout,
)
from tests.support.featdel_repo import mined_shop
from tests.support.honest_fixes import (
    CART_ADD_FIXES,
    LEDGER_FIXES,
    LEDGER_PROJECT,
    OPS_FILE_FIXES,
    OPS_FIXES,
    PRICING_FILE_FIXES,
    PRICING_FILES,
    PRICING_FIXES,
)
from tests.support.scripted_server import tool
from tests.support.swegym_repo import write_jsonl
from tests.support.swegym_rows import Project, build_row, local_config

pytestmark = pytest.mark.slow

CASES = (
    [("feature-deletion", name) for name in PRICING_FIXES]
    + [("feature-deletion:Cart.add", name) for name in CART_ADD_FIXES]
    + [("swe-gym", name) for name in OPS_FIXES]
    + [("swe-gym:ledger", name) for name in LEDGER_FIXES]
    + [("feature-deletion:files", name) for name in PRICING_FILE_FIXES]
    + [("swe-gym:files", name) for name in OPS_FILE_FIXES]
)


@pytest.fixture(scope="module")
def cart_add(tmp_path_factory: pytest.TempPathFactory, private_boxes: Path) -> vf.Task:  # noqa: F811
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    _, tasks_file, _ = mined_shop(tmp_path_factory)
    config = resolve_env_config(
        {"taskset": {"id": "feature-deletion", "tasks": str(tasks_file), "task": {"test_timeout_s": TIMEOUT_S}}}
    )
    return {task.data.name: task for task in load_taskset(config.taskset)}["shop-repo:shop/cart.py::Cart.add"]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory, private_boxes: Path) -> vf.Task:  # noqa: F811
    root = tmp_path_factory.mktemp("honest-ledger")
    row, repo = build_row(root / "src", Project(**LEDGER_PROJECT, expected="usable"))
    local = {**local_config(root / "cache", {row["repo"]: str(repo)}), "test_timeout_s": TIMEOUT_S}
    config = SWEGymTasksetConfig(data_file=write_jsonl(root / "rows.jsonl", [row]), mode="local", task=local)
    (task,) = SWEGymTaskset(config).load()
    return task


def test_the_ledger_oracle_records_what_the_gold_chose(ledger: vf.Task) -> None:
    """The gold's choices are in its recorded behaviour (so each honest fix below is judged against them): the new
    exception class recorded as the base the starting tree has, the generator drained, the tuple, the Decimal; the
    oracle is usable and not replay-blind."""
    oracle = ledger.oracle()
    assert oracle.usable and oracle.reason is None and not oracle.detail, oracle
    found = {call.target.partition(":")[2]: call for call in oracle.calls}
    assert set(found) >= {"percent", "span", "evens", "pairs", "level", "rank", "total", "root", "median"}, found
    raised = [call.raised for call in oracle.calls if call.raised]
    assert raised == [["exc", "builtins:ValueError", [["str", "150 is not within [0, 100]"]]]], raised
    assert found["pairs"].result[0] == "iter" and found["span"].result[0] == "tuple", found
    assert found["total"].result == ["decimal", "0.30"], found["total"]


@pytest.mark.parametrize(("env_name", "fix"), CASES)
def test_honest_fix_scores_one(
    envs: dict[str, Env],  # noqa: F811
    cart_add: vf.Task,
    ledger: vf.Task,
    env_name: str,
    fix: str,
) -> None:
    if env_name == "feature-deletion":
        env = envs[env_name]
        extra = [tool("create", path=path, content=text) for path, text in PRICING_FILES.get(fix, {}).items()]
        steps = [*extra, tool("create", path="shop/pricing.py", content=PRICING_FIXES[fix]), *env.honest[1:]]
    elif env_name == "feature-deletion:Cart.add":
        env = Env(env_name, cart_add, "shop", [], None, [], None, [])
        steps = [tool("create", path="shop/cart.py", content=CART_ADD_FIXES[fix])]
    elif env_name == "swe-gym":
        env = envs[env_name]
        steps = [tool("create", path="calc/ops.py", content=OPS_FIXES[fix])]
    elif env_name == "feature-deletion:files":
        env = envs["feature-deletion"]
        steps = [tool("create", path=path, content=text) for path, text in PRICING_FILE_FIXES[fix].items()]
        steps += env.honest[1:]
    elif env_name == "swe-gym:files":
        env = envs["swe-gym"]
        steps = [tool("create", path=path, content=text) for path, text in OPS_FILE_FIXES[fix].items()]
    else:
        env = Env(env_name, ledger, "ledger", [], None, [], None, [])
        steps = [tool("create", path="ledger/core.py", content=LEDGER_FIXES[fix])]
    trace = rollout(env, steps)
    grading = trace.info["grading"]
    assert trace.reward == 1.0, (grading["void"], grading["replay_mismatches"], grading["fail_to_pass_failed"])
    if env_name.endswith(":files"):  # a new subpackage or data file of the task's package is kept
        assert grading["removed"] == [], grading["removed"]
    if env_name not in (
        "swe-gym",
        "swe-gym:files",
    ):  # the toy clamp's replay is on too, but these are the cases the replay used to refuse
        assert grading["replay_calls"] > 0 and grading["replay"] == 1.0, grading
    assert len(CASES) >= 30


def test_a_cart_add_that_only_returns_self_scores_zero(cart_add: vf.Task) -> None:
    """The relaxations do not reach what the gold did: `Cart.add` returning `self` is taken where the gold returned
    None, but the gold changed `self.lines` (an argument), so a stub that skips the change fails the replay."""
    stub = CART_ADD_FIXES["add-returns-self"].replace("        self.lines.append((name, price, quantity))\n", "")
    trace = rollout(
        Env("feature-deletion:Cart.add", cart_add, "shop", [], None, [], None, []),
        [tool("create", path="shop/cart.py", content=stub)],
    )
    grading = trace.info["grading"]
    assert trace.reward == 0.0 and grading["replay"] < 1.0, grading
    assert any("in-place" in why for why in grading["replay_mismatches"]), grading["replay_mismatches"]
