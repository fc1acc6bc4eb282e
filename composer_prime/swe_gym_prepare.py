"""`composer-prime swe-gym-prepare`: build swe-gym's local-mode snapshots and environments ahead of a run.

Rollouts build them lazily too (inside task setup, under its timeout); preparing first keeps the first rollout of each
repo and version from paying minutes of pip installs, and shows progress. With `--validate`, each instance is also
graded untouched (must fail) and with its gold patch (must pass) on the subprocess runtime.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-file", type=Path, help="SWE-Gym rows as JSONL or parquet")
    source.add_argument("--dataset", help="hub dataset, e.g. SWE-Gym/SWE-Gym-Lite (needs swe-gym[hub])")
    parser.add_argument("--split", default="train", help="hub dataset split (default: train)")
    parser.add_argument("--repo", action="append", dest="repos", help="keep only this owner/name (repeatable)")
    parser.add_argument("--instance-id", action="append", dest="instance_ids", help="keep only this id (repeatable)")
    parser.add_argument(
        "--task-config",
        type=Path,
        help="JSON or TOML file with the taskset's `task` settings (e.g. `local.repo_sources`, `local.envs`)",
    )
    parser.add_argument("--validate", action="store_true", help="also grade each instance untouched and gold")


def _task_config(path: Path | None) -> dict:
    if path is None:
        return {}
    text = path.read_text()
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    return json.loads(text)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import uuid

    import verifiers.v1 as vf
    from swe_gym.local import PrepError, prepare_env, prepare_snapshot
    from swe_gym.taskset import SWEGymTaskset, SWEGymTasksetConfig
    from verifiers.v1.runtimes import make_runtime

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = SWEGymTasksetConfig(
        data_file=args.data_file,
        dataset=args.dataset or "SWE-Gym/SWE-Gym",
        split=args.split,
        repos=args.repos,
        instance_ids=args.instance_ids,
        mode="local",
        task=_task_config(args.task_config),
    )
    tasks = SWEGymTaskset(config).load()
    local = config.task.local
    print(f"swe-gym: preparing {len(tasks)} instances under {local.root()}", flush=True)

    async def validate(task) -> bool:
        runtime = make_runtime(vf.SubprocessConfig(), name=f"swe-gym-prepare-{uuid.uuid4().hex[:8]}")
        runtime.env = dict(task.runtime_env())
        trace = vf.Trace(
            task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name="prepare", trainable=False),
        )
        await runtime.start()
        try:
            await task.setup(trace, runtime)
            return await task.validate(runtime)
        finally:
            await runtime.stop()

    failed = 0
    for i, task in enumerate(tasks, start=1):
        row = task.row()
        started = time.monotonic()
        try:
            snapshot = prepare_snapshot(local, row)
            venv = prepare_env(local, row, snapshot)
            status = f"ready ({venv.parent.name}/{venv.name})"
            if args.validate:
                valid = asyncio.run(validate(task))
                status += ", valid" if valid else ", INVALID: resolved untouched or unresolved with the gold patch"
                failed += not valid
        except PrepError as exc:
            failed += 1
            status = f"FAILED: {exc}"
        except Exception as exc:  # noqa: BLE001 - one broken instance must not stop the batch
            failed += 1
            status = f"FAILED: {type(exc).__name__}: {exc}"
        print(f"[{i}/{len(tasks)}] {row.instance_id}: {status} in {time.monotonic() - started:.1f}s", flush=True)
    print(f"swe-gym: {len(tasks) - failed} of {len(tasks)} instances prepared{' and valid' if args.validate else ''}")
    return 1 if failed else 0
