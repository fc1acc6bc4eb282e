"""Containers from a package's environment image: the box the miner's pytest runs in, and the fresh boxes every kept
task is validated in.

The mining box is one long-lived container per package (`sleep infinity`, no network but loopback) with the
package's scratch folder mounted at the same path, so the miner's private work copy, and the files its trace and
behaviour plugins write, have the same path on the host and in the box. `use` points the miner's runtime hook
(`testrun.RUNTIME`) at it: every suite run and replay is an exec there, through verifiers' docker/podman runtime
(`attach`), with the image's Python, its pinned test dependencies and the image's own `PATH`. The package's code
reaches the box only through that mount; the image never holds it.

Validation loads the tasks through the feature-deletion taskset (by id, as the orchestrator does) and runs each in
two fresh containers from the image on verifiers' runtime, exactly as a rollout's box: the untouched task must score
0.0 and the gold patch 1.0, each graded with the full grader (grader box included). A task failing either is dropped
with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from composer_prime.process.commands import run_checked_host

VALIDATION_SLACK_S = 300.0
"""Time a validation box may take beyond twice the task's suite limit (start, setup, grader box)."""


class BoxError(Exception):
    """A container could not be started or used."""


HEARTBEAT_S = 20.0
"""How often the worker touches the mining box's heartbeat file."""
HEARTBEAT_LAPSE_S = 120
"""A mining box whose heartbeat is older than this stops itself (and `--rm` removes it): a worker killed with
SIGKILL, which runs no cleanup, leaves no container behind for longer."""


@contextlib.contextmanager
def mining_box(engine: str, image: str, scratch: Path):
    """A running container from `image` with `scratch` mounted at its own path; its name. Removed on exit, and
    stops itself within `HEARTBEAT_LAPSE_S` of the worker's last heartbeat when the worker dies without cleanup."""
    name = f"composer-prime-mine-{secrets.token_hex(6)}"
    path = str(scratch.resolve())
    beat = scratch / f".{name}.alive"
    beat.touch()
    watch = f'while [ $(( $(date +%s) - $(stat -c %Y "{beat.resolve()}") )) -lt {HEARTBEAT_LAPSE_S} ]; do sleep 5; done'
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                beat.touch()

    run_checked_host(
        [
            engine,
            "run",
            "-d",
            "--rm",
            "--network",
            "none",
            "--name",
            name,
            "-v",
            f"{path}:{path}",
            "--entrypoint",
            "sh",
            image,
            "-c",
            watch,
        ],
        error=BoxError,
        timeout_s=300.0,
    )
    threading.Thread(target=heartbeat, name=f"{name}-heartbeat", daemon=True).start()
    try:
        yield name
    finally:
        stop.set()
        with contextlib.suppress(BoxError):
            now = ["-t", "0"] if engine == "podman" else []  # docker's rm -f kills at once; podman's waits 10 s
            run_checked_host([engine, "rm", "-f", *now, name], error=BoxError, timeout_s=120.0)


def use(engine: str, container: str) -> None:
    """Run every test run and replay of the miner (`testrun.RUNTIME`) in `container`."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes.docker import DockerRuntime, PodmanRuntime

    from composer_prime.mining import testrun

    runtime_cls, config_cls = (
        (PodmanRuntime, vf.PodmanConfig) if engine == "podman" else (DockerRuntime, vf.DockerConfig)
    )

    @contextlib.asynccontextmanager
    async def attached(cwd: Path, env: dict[str, str]) -> AsyncIterator[vf.Runtime]:
        async with runtime_cls.attach(config_cls(), container) as runtime:
            runtime.config = runtime.config.model_copy(update={"workdir": str(cwd.resolve())})
            runtime.env = {key: value for key, value in env.items() if key != "PATH"}  # the image's PATH
            yield runtime

    testrun.RUNTIME = attached


@dataclass(frozen=True)
class Verdict:
    task_id: str
    kept: bool
    reason: str | None
    seconds: float


def validate(tasks_file: Path, engine: str, done: set[str], report: Callable[[Verdict], None]) -> None:
    """Validate each task of `tasks_file` (rows naming their image) not in `done`; `report` gets each verdict."""
    import verifiers.v1 as vf
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(tasks_file)}})
    config_cls = vf.PodmanConfig if engine == "podman" else vf.DockerConfig
    for task in load_taskset(config.taskset):
        if task.data.name in done:
            continue
        started = time.monotonic()
        limit = 2 * task.test_timeout_s + VALIDATION_SLACK_S
        runtime_config = config_cls(image=task.data.image, workdir=task.data.workdir)
        try:
            untouched, gold = asyncio.run(_both(task, runtime_config, limit))
        except Exception as exc:  # a box that fails is a dropped task, never a crashed corpus
            verdict = Verdict(
                task.data.name,
                False,
                f"validation error: {type(exc).__name__}: {exc}"[:500],
                time.monotonic() - started,
            )
        else:
            reason = None
            if untouched[0] != 0.0:
                reason = f"untouched scores {untouched[0]}: {untouched[1]}"
            elif gold[0] != 1.0:
                reason = f"gold scores {gold[0]}: {gold[1]}"
            verdict = Verdict(task.data.name, reason is None, reason, time.monotonic() - started)
        report(verdict)


async def _both(task, runtime_config, limit: float) -> list[tuple[float, str]]:  # type: ignore[no-untyped-def]
    """The untouched and the gold run, side by side, each in its own fresh box."""
    runs = [asyncio.wait_for(_score(task, runtime_config, gold=gold), limit) for gold in (False, True)]
    return list(await asyncio.gather(*runs))


async def _score(task, runtime_config, gold: bool) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    """Set the task up in a fresh box, apply the gold patch if asked, score it as a rollout is scored; (reward, why)."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    runtime = make_runtime(runtime_config, name=f"composer-prime-validate-{secrets.token_hex(4)}")
    await runtime.start()
    try:
        trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig(runtime=runtime_config), name="validate", trainable=False),
        )
        hook_args = {"trace": trace, "runtime": runtime}  # verifiers passes a hook's arguments by name
        await task.setup(**{k: v for k, v in hook_args.items() if k in inspect.signature(task.setup).parameters})
        if gold:
            await runtime.write(".composer-prime-gold.patch", task.data.mined.gold_patch.encode())
            applied = await runtime.run(["git", "apply", ".composer-prime-gold.patch"], {})
            if applied.exit_code != 0:
                return 0.0, f"git apply of the gold patch failed: {applied.stderr.strip()[-300:]}"
            await runtime.run(["rm", "-f", ".composer-prime-gold.patch"], {})
        await task.finalize(trace, runtime)
        await task.score(trace, runtime)
        grading = trace.info.get("grading") or {}
        why = {
            key: grading.get(key)
            for key in ("error", "void", "fail_to_pass_failed", "pass_to_pass_failed", "replay_mismatches")
        }
        return float(trace.reward or 0.0), ", ".join(f"{k} {str(v)[:150]}" for k, v in why.items() if v)
    finally:
        await runtime.stop()
