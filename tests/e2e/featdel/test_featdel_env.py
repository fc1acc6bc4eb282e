"""The feature-deletion environment on mined tasks: validation (gold 1.0, untouched 0.0) and real composer-agent
rollouts on the subprocess runtime, driven by a scripted model on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import verifiers.v1 as vf

from composer_prime.process.reaper import new_token
from tests.support.featdel_repo import APPLY_DISCOUNT, CART, FILES, INIT, PRICING
from tests.support.rollouts import scripted_rollout
from tests.support.scripted_server import tool

pytestmark = pytest.mark.usefixtures("python_on_path")


def load_tasks(tasks_file) -> dict[str, vf.Task]:
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(tasks_file)}})
    taskset = load_taskset(config.taskset)
    return {task.data.name: task for task in taskset}


def score_in_fresh_box(task: vf.Task, gold: bool) -> tuple[bool | None, vf.Trace]:
    """What `validate` does per check: set the task up in a fresh runtime, then apply the gold patch (gold) or
    finalize and score it untouched (noop)."""
    from verifiers.v1.runtimes import make_runtime

    async def check() -> tuple[bool | None, vf.Trace]:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"featdel-{'gold' if gold else 'noop'}-{new_token()}")
        trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name="validate", trainable=False),
        )
        await runtime.start()
        try:
            await task.setup(runtime)
            if gold:
                return await task.validate(runtime), trace
            await task.finalize(trace, runtime)
            await task.score(trace, runtime)
            return None, trace
        finally:
            await runtime.stop()

    return asyncio.run(asyncio.wait_for(check(), 120))


def test_taskset_resolves_with_composer_agent_as_default_harness(tasks_file, tmp_path, caplog):
    from verifiers.v1.utils.loaders import default_harness_id, harness_class, resolve_env_config

    from composer_agent import ComposerAgentConfig, ComposerAgentHarness

    assert harness_class(default_harness_id("feature-deletion")) is ComposerAgentHarness
    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(tasks_file)}})
    assert isinstance(config.agent_harnesses()["agent"], ComposerAgentConfig)
    pinned = resolve_env_config({"taskset": {"id": "feature-deletion"}, "agent": {"harness": {"id": "bash"}}})
    assert pinned.agent.harness.id == "bash"
    tasks = load_tasks(tasks_file)
    assert len(tasks) == 9 and tasks[APPLY_DISCOUNT].data.prompt.startswith("The function `apply_discount`")

    rows = tasks_file.read_text().splitlines()
    broken = json.loads(rows[1])
    del broken["gold_patch"]
    wrong = json.loads(rows[2])
    wrong["pass_to_pass"] = 7
    bad_file = tmp_path / "tasks.jsonl"
    base = tasks_file.with_name(json.loads(rows[0])["base"])
    (tmp_path / base.name).write_bytes(base.read_bytes())  # the repository state travels with the tasks file
    bad_file.write_text("\n".join([rows[0], json.dumps(broken), json.dumps(wrong), *rows[3:]]) + "\n")
    with caplog.at_level(logging.WARNING):
        assert len(load_tasks(bad_file)) == 7
    assert f"row 2 (task_id {broken['task_id']!r}): field 'gold_patch' is missing" in caplog.text
    assert f"row 3 (task_id {wrong['task_id']!r}): field 'pass_to_pass' = 7" in caplog.text
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_tasks(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("name", [APPLY_DISCOUNT, "shop-repo:shop/cart.py::Cart.total", "shop-repo:shop/textutil.py"])
def test_validate_gold_scores_one_and_untouched_zero(tasks_file, name):
    task = load_tasks(tasks_file)[name]
    valid, _ = score_in_fresh_box(task, gold=True)
    assert valid is True
    _, trace = score_in_fresh_box(task, gold=False)
    assert trace.reward == 0.0
    assert trace.metrics["fail_to_pass"] == 0.0 and trace.metrics["pass_to_pass"] == 1.0
    grading = trace.info["grading"]
    assert grading["error"] is None and grading["void"] == [] and grading["pass_to_pass_failed"] == []
    assert sorted(grading["fail_to_pass_failed"]) == sorted(task.data.mined.fail_to_pass)
    assert trace.metrics["network_isolated"] == 1.0


def test_tasks_from_a_dataset_folder_grade_as_from_their_tasks_file(tasks_file, tmp_path):
    """The mined shop tasks, built into a dataset as mine-corpus lays a package out (`composer-prime corpus-dataset`),
    load through the taskset from the folder and grade as the tasks file's do: gold 1.0, untouched 0.0."""
    from composer_prime.corpus.dataset import build_dataset
    from tests.support.corpus import add_package

    rows = [json.loads(line) for line in tasks_file.read_text().splitlines()]
    add_package(tmp_path, "shop", "1.0", rows, tasks_file, license="MIT")
    build_dataset(tmp_path, publish=True, shard_rows=4, log=lambda line: None)
    tasks = load_tasks(tmp_path)
    assert sorted(tasks) == sorted(load_tasks(tasks_file))
    task = tasks[APPLY_DISCOUNT]
    assert task.data.mined == load_tasks(tasks_file)[APPLY_DISCOUNT].data.mined
    valid, _ = score_in_fresh_box(task, gold=True)
    assert valid is True
    _, trace = score_in_fresh_box(task, gold=False)
    assert trace.reward == 0.0 and trace.metrics["pass_to_pass"] == 1.0


def rollout(tasks_file, script) -> tuple[vf.Trace, list[dict]]:
    return scripted_rollout(load_tasks(tasks_file)[APPLY_DISCOUNT], script)


def tool_output(requests: list[dict], turn: int) -> str:
    message = requests[turn]["messages"][-1]
    assert message["role"] == "tool"
    return message["content"]


def test_rollout_restoring_the_feature_scores_one(tasks_file):
    script = [
        tool("view", path="shop/pricing.py"),
        tool("create", path="shop/pricing.py", content=PRICING),
        tool("str_replace", path="shop/cart.py", old_str='"""A shopping cart."""\n', new_str=CART.split("\n\n\n")[0]),
        tool("create", path="shop/__init__.py", content=INIT),
        tool("bash", command="python -m pytest -q"),
        tool("finish", message="apply_discount is back"),
    ]
    trace, requests = rollout(tasks_file, script)
    assert trace.ok, trace.errors
    assert "def format_price" in tool_output(requests, 1) and "def apply_discount" not in tool_output(requests, 1)
    assert "[exit code 0]" in tool_output(requests, 5)
    assert trace.metrics["fail_to_pass"] == 1.0 and trace.metrics["pass_to_pass"] == 1.0
    assert trace.reward == 1.0
    assert "+def apply_discount(amount: float, percent: float) -> float:" in trace.info["patch"]


def test_rollout_editing_the_tests_scores_zero(tasks_file):
    fake_tests = (
        "def test_discount_reduces_amount():\n    pass\n\n\ndef test_discount_rejects_bad_percent():\n    pass\n"
    )
    # a conftest.py that would make every hidden test pass if it survived grading
    sneaky_conftest = (
        "import shop.cart\nimport shop.pricing\n\n\ndef _apply(amount, percent):\n"
        "    if not 0 <= percent <= 100:\n        raise ValueError(percent)\n"
        "    return round(amount * (100 - percent) / 100, 2)\n\n\n"
        "shop.pricing.apply_discount = shop.cart.apply_discount = _apply\n"
    )
    broken_visible = FILES["tests/test_textutil.py"].replace('== "AL"', '== "nope"')
    script = [
        tool("create", path="tests/test_pricing.py", content=fake_tests),
        tool("create", path="conftest.py", content=sneaky_conftest),
        tool("create", path="tests/test_textutil.py", content=broken_visible),
        tool("create", path="pytest.ini", content="[pytest]\naddopts = -p no:warnings\n"),
        tool("finish", message="tests pass now"),
    ]
    trace, _ = rollout(tasks_file, script)
    assert trace.ok, trace.errors
    assert trace.reward == 0.0
    assert trace.metrics["fail_to_pass"] == 0.0
    # the visible test the agent broke was restored from the task before grading
    assert trace.metrics["pass_to_pass"] == 1.0
    assert "tests/test_pricing.py::test_discount_reduces_amount" in trace.info["grading"]["fail_to_pass_failed"]


def test_rollout_searching_for_the_deleted_code_finds_nothing(tasks_file):
    probe = (
        "git rev-list --all --count; git reflog | wc -l; git stash list | wc -l; "
        "find . \\( -name '*.pyc' -o -name __pycache__ -o -name '.*_cache' -o -name build -o -name '*.egg-info' "
        "-o -name 'test_pricing.py' \\) | wc -l; "
        "git cat-file --batch-all-objects --batch | grep -c 'reduced = amount'"
    )
    script = [
        tool("search", pattern=r"reduced = amount|def apply_discount", path="."),
        tool("bash", command=probe),
        tool("finish", message="nothing to recover"),
    ]
    trace, requests = rollout(tasks_file, script)
    assert trace.ok, trace.errors
    assert "no matches" in tool_output(requests, 1) and "shop/" not in tool_output(requests, 1)
    counts = tool_output(requests, 2).split("[exit code")[0].split()
    assert counts == ["1", "1", "0", "0", "0"]
    assert trace.reward == 0.0


def test_bundled_sample_loads_when_no_tasks_file_is_set_and_its_gold_patch_solves(caplog):
    """`vf-eval feature-deletion` on a fresh machine: no mining step, the sample mined from toolz 1.2.0 loads."""
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion"}})
    with caplog.at_level(logging.INFO):
        tasks = {task.data.name: task for task in load_taskset(config.taskset)}
    assert "loading the bundled sample (toolz-1.2.0.jsonl" in caplog.text
    assert sorted(tasks) == [
        "toolz-1.2.0:toolz/functoolz.py::Compose",
        "toolz-1.2.0:toolz/functoolz.py::is_arity",
        "toolz-1.2.0:toolz/sandbox/core.py::EqualityHashKey",
    ]
    task = tasks["toolz-1.2.0:toolz/functoolz.py::is_arity"]
    assert task.data.prompt.startswith("The function `is_arity`")
    valid, _ = score_in_fresh_box(task, gold=True)
    assert valid is True
    _, trace = score_in_fresh_box(task, gold=False)
    assert trace.reward == 0.0 and trace.metrics["pass_to_pass"] == 1.0
