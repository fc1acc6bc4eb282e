"""A grading's fixed cost: how many runtime calls it makes.

On a docker or podman box every `runtime.run`, `read` and `write` is a `podman exec` of 0.1 to 0.3 s, and a grading
that made one per step (about 40) cost seconds before its first test ran. The steps that run in the box are batched
into plans of the grading driver (`composer_prime.grading.batch`): a real feature-deletion grading of the mined shop
task (replay, listing, removals, owned test files, canaries, the suite, the interpreter check) on the subprocess
runtime, the gold patch applied, counted call by call.
"""

from __future__ import annotations

import asyncio

import pytest
import verifiers.v1 as vf
from verifiers.v1.runtimes import subprocess as local

from composer_prime.process.reaper import new_token
from tests.support.featdel_repo import APPLY_DISCOUNT

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("python_on_path")]

MAX_CALLS = 12
"""Runtime calls one grading may make: the rollout's end (namespace, reaper), the private copy, two driver plans of
two calls each, the interpreter check, the copy's removal; 34 before the driver."""


def test_a_grading_makes_a_bounded_number_of_runtime_calls(tasks_file, monkeypatch) -> None:
    from verifiers.v1.runtimes import make_runtime
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(tasks_file)}})
    task = {t.data.name: t for t in load_taskset(config.taskset)}[APPLY_DISCOUNT]
    calls: list[str] = []

    for name in ("run", "read", "write"):
        method = getattr(local.SubprocessRuntime, name)

        def counted(method=method, name=name):  # type: ignore[no-untyped-def]
            async def call(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                calls.append(name)
                return await method(self, *args, **kwargs)

            return call

        monkeypatch.setattr(local.SubprocessRuntime, name, counted())

    async def go():  # type: ignore[no-untyped-def]
        runtime = make_runtime(vf.SubprocessConfig(), name=f"cost-{new_token()}")
        await runtime.start()
        try:
            await task.setup(runtime)
            gold = task.data.mined.gold_patch.encode()
            await runtime.write("gold.patch", gold)
            assert (await runtime.run(["git", "apply", "gold.patch"], {})).exit_code == 0
            await runtime.run(["rm", "-f", "gold.patch"], {})
            calls.clear()
            return await task.grade(runtime)
        finally:
            await runtime.stop()

    grade = asyncio.run(asyncio.wait_for(go(), 300))
    assert grade.solved, (grade.error, grade.void, grade.fail_to_pass_failed, grade.pass_to_pass_failed)
    assert grade.replay_calls > 0 and grade.replay == 1.0  # the replay ran, and so did the canaries and the suite
    assert len(calls) <= MAX_CALLS, calls
