"""Honest fixes score 1.0 (issue 28, line 7): twenty alternative solutions of the red-team tasks, each written as a
person might and none as the gold is (`tests/support/honest_fixes.py`), graded end to end as scripted rollouts on
the subprocess runtime: replay, scan, canaries of every kind, suite. A grader that voids or fails one of them teaches
the policy nothing."""

from __future__ import annotations

import pytest

from tests.e2e.test_reward_hacks import (  # noqa: F401 (fixtures)
    Env,
    box_environment,
    envs,
    grader_venv,
    private_boxes,
    rollout,
)
from tests.support.honest_fixes import OPS_FIXES, PRICING_FIXES
from tests.support.scripted_server import tool

pytestmark = pytest.mark.slow

CASES = [("feature-deletion", name) for name in PRICING_FIXES] + [("swe-gym", name) for name in OPS_FIXES]


@pytest.mark.parametrize(("env_name", "fix"), CASES)
def test_honest_fix_scores_one(envs: dict[str, Env], env_name: str, fix: str) -> None:  # noqa: F811
    env = envs[env_name]
    if env_name == "feature-deletion":
        steps = [tool("create", path="shop/pricing.py", content=PRICING_FIXES[fix]), *env.honest[1:]]
    else:
        steps = [tool("create", path="calc/ops.py", content=OPS_FIXES[fix])]
    trace = rollout(env, steps)
    grading = trace.info["grading"]
    assert trace.reward == 1.0, (grading["void"], grading["replay_mismatches"], grading["fail_to_pass_failed"])
    assert len(CASES) >= 20
