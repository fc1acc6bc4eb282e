"""swe-gym's oracle: the gold patch's recorded behaviour (`swe_gym.oracle`), on SWE-Gym-shaped rows built from small
projects with real bug-fix commits (`tests/support/swegym_rows.py`), recorded with real pytest runs and replays."""

from __future__ import annotations

import pytest
import verifiers.v1 as vf
from swe_gym.taskset import SWEGymTask, SWEGymTaskset, SWEGymTasksetConfig

from tests.support import attacks
from tests.support.rollouts import scripted_rollout
from tests.support.scripted_server import tool
from tests.support.swegym_repo import write_jsonl
from tests.support.swegym_rows import PROJECTS, STATS, STATS_HONEST, build_rows, local_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SWEGymTask]:
    root = tmp_path_factory.mktemp("oracle-rows")
    rows, sources = build_rows(root / "src")
    task = {**local_config(root / "cache", sources), "replay": "if-usable"}  # every kind of row
    config = SWEGymTasksetConfig(data_file=write_jsonl(root / "rows.jsonl", rows), mode="local", task=task)
    return {task.data.repo.split("/")[0]: task for task in SWEGymTaskset(config).load()}


def test_each_row_gets_the_oracle_its_fix_allows(tasks: dict[str, SWEGymTask]) -> None:
    """Usable where the tests call a function with plain values whose answer the fix changes; each other kind of fix
    is refused for its reason (`bench/swegym_oracles.py` prints the same as a table)."""
    got = {}
    for project in PROJECTS:
        oracle = tasks[project.name].oracle()
        assert oracle is not None
        got[project.name] = "usable" if oracle.usable else oracle.reason
        assert oracle.usable == bool(oracle.calls) and (oracle.discriminating > 0) == oracle.usable, oracle
    assert got == {project.name: project.expected for project in PROJECTS}
    summary = tasks["stats"].oracle().summary()
    assert summary["calls"] == 4 and "expected" not in str(summary) and "result" not in summary


def test_the_oracle_is_recorded_once_and_again_when_the_row_changes(tasks: dict[str, SWEGymTask]) -> None:
    task = tasks["units"]
    first = task.oracle()
    assert task.oracle() == first  # read back from the host's file, not recorded again
    more = [*task.data.fail_to_pass, "tests/test_temperature.py::test_zero_offset"]
    changed = SWEGymTask(task.data.model_copy(update={"fail_to_pass": more}), task.config).oracle()
    # the added test was a PASS_TO_PASS test of the same file, whose calls were recorded beside the others already
    assert changed.key != first.key and changed.usable and changed.seen == first.seen


def run_fix(task: SWEGymTask, source: str) -> vf.Trace:
    path = f"{task.data.repo.split('/')[0]}/core.py"
    trace, _ = scripted_rollout(task, [tool("create", path=path, content=source), tool("finish", message="done")])
    assert trace.ok, trace.errors
    return trace


def test_an_honest_fix_unlike_the_gold_scores_one(tasks: dict[str, SWEGymTask]) -> None:
    """`0` where the gold returns `0.0`, and the sample kept as `self._sample` where the gold keeps `self._values`:
    the tests cannot tell, and neither can the replay (numbers as `==` compares them, instances by their public
    attributes)."""
    task = tasks[STATS.name]
    oracle = task.oracle()
    recorded = {call.target: call.result for call in oracle.calls}
    assert recorded["stats.core:mean"] == ["float", "0.0"]
    assert ["str", "_values"] in recorded["stats.core:summarize"][2][1][0], recorded
    trace = run_fix(task, STATS_HONEST)
    grading = trace.info["grading"]
    assert trace.reward == 1.0 and grading["replay"] == 1.0, grading
    assert grading["replay_calls"] - grading["regression_calls"] == 4, grading  # the oracle's, beside the P2P calls
    assert trace.info["swe_gym"]["oracle"]["usable"] is True


def test_a_fix_that_knows_only_the_tests_answers_scores_zero(tasks: dict[str, SWEGymTask]) -> None:
    """The fix is switched on only when a test is up the stack: the suite and the canaries pass, the replay (the
    gold's calls, made by no test) does not."""
    switched = attacks.UNDER_A_TEST_FRAME + STATS.fix["stats/core.py"].replace(
        "    if not values:\n", "    if not values and _under_test():\n"
    )
    trace = run_fix(tasks[STATS.name], switched)
    grading = trace.info["grading"]
    assert trace.reward == 0.0 and grading["replay"] < 1.0 and not grading["void"], grading
    assert grading["fail_to_pass_failed"] == [] and "stats.core:mean" in grading["replay_mismatches"][0]


def test_a_row_without_a_usable_oracle_is_graded_by_its_tests_and_says_why(tasks: dict[str, SWEGymTask]) -> None:
    task = tasks["lrukit"]
    trace = run_fix(task, "")  # `lrukit/core.py`: a new module, the bug untouched
    grading = trace.info["grading"]
    # only the PASS_TO_PASS tests' calls are replayed: no feature's, so `replay_used` is 0
    assert trace.reward == 0.0 and grading["replay_calls"] == grading["regression_calls"], grading
    assert grading["metrics"]["replay_used"] == 0.0, grading
    assert grading["replay_note"] == "no usable oracle: base answers as the gold", grading
    assert trace.info["swe_gym"]["oracle"] == {**trace.info["swe_gym"]["oracle"], "usable": False}


def test_replay_require_refuses_a_row_without_a_usable_oracle(tasks: dict[str, SWEGymTask]) -> None:
    task = tasks["lrukit"]
    strict = SWEGymTask(task.data, task.config.model_copy(update={"replay": "require"}))
    with pytest.raises(
        vf.SandboxError, match=r'replay = "require" refuses lrukit__lrukit-1: .*base answers as the gold'
    ):
        strict.oracle()
    assert SWEGymTask(task.data, task.config.model_copy(update={"replay": "off"})).oracle() is None
