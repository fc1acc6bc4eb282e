"""`swe-gym-prepare`: build swe-gym's local-mode snapshots and environments ahead of a run.

Rollouts build them lazily too (inside task setup, under its timeout); preparing first keeps the first rollout of each
repo and version from paying minutes of pip installs, and shows progress. Each instance's oracle (the gold patch's
recorded behaviour, `oracle.py`) is recorded too, unless the task's `replay` is `off`, and the run ends with a table:
how many instances have a usable oracle, and why the rest do not. With `--validate-gold`, each instance is also
graded untouched (must fail) and with its gold patch (must pass, replay included) on the subprocess runtime, through
the task's own verifiers `validate` hook.

Options are the fields of `PrepareConfig` (pydantic_config: kebab-case flags, docstring help, `@ prepare.toml`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from swe_gym.taskset import SWEGymTaskConfig


class PrepareConfig(BaseModel):
    """What to prepare: the rows (a local file or a hub dataset), filters, and the taskset's `task` settings."""

    model_config = ConfigDict(extra="forbid")

    data_file: Path | None = None
    """SWE-Gym rows as JSONL or parquet (or name a hub `dataset`)."""
    dataset: str | None = None
    """Hub dataset, e.g. SWE-Gym/SWE-Gym-Lite (needs swe-gym[hub] and a reachable hub)."""
    split: str = "train"
    """Hub dataset split."""
    repos: list[str] | None = None
    """Keep only these owner/name repositories."""
    instance_ids: list[str] | None = None
    """Keep only these instance ids."""
    task: SWEGymTaskConfig = SWEGymTaskConfig()
    """The taskset's `task` settings (e.g. `local.repo_sources`, `local.envs`): `--task @ task.toml`, or under
    `[task]` in a TOML passed with `@ prepare.toml`."""
    validate_gold: bool = False
    """Also grade each instance untouched (must fail) and with its gold patch (must pass)."""

    @model_validator(mode="after")
    def _one_source(self) -> PrepareConfig:
        if (self.data_file is None) == (self.dataset is None):
            raise ValueError(
                "name exactly one source of rows: --data-file rows.jsonl or --dataset SWE-Gym/SWE-Gym-Lite"
            )
        if self.data_file is not None and not self.data_file.is_file():
            raise ValueError(f"--data-file {self.data_file} does not exist; give the path of a JSONL or parquet file")
        return self


def main(argv: list[str] | None = None, prog: str = "swe-gym-prepare") -> int:
    from composer_prime.cli import UsageError, parse_config

    try:
        config = parse_config(PrepareConfig, sys.argv[1:] if argv is None else argv, prog)
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    return run(config)


def run(args: PrepareConfig) -> int:
    import logging

    from swe_gym.taskset import SWEGymTaskset, SWEGymTasksetConfig

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = SWEGymTasksetConfig(
        data_file=args.data_file,
        dataset=args.dataset or "SWE-Gym/SWE-Gym",
        split=args.split,
        repos=args.repos,
        instance_ids=args.instance_ids,
        mode="local",
        task=args.task,
    )
    try:
        tasks = SWEGymTaskset(config).load()
    except ValueError as err:  # no rows left after validation and filters; the message names the counts
        print(f"swe-gym-prepare: {err}", file=sys.stderr)
        return 2
    print(f"swe-gym: preparing {len(tasks)} instances under {config.task.local.root()}", flush=True)
    failed = 0
    reasons: dict[str, int] = {}
    for i, task in enumerate(tasks, start=1):
        started = time.monotonic()
        ok, status, reason = prepare_one(task, config.task.local, args.validate_gold)
        failed += not ok
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + 1
        print(f"[{i}/{len(tasks)}] {task.row().instance_id}: {status} in {time.monotonic() - started:.1f}s", flush=True)
    checked = " and valid" if args.validate_gold else ""
    print(f"swe-gym: {len(tasks) - failed} of {len(tasks)} instances prepared{checked}")
    if reasons:
        print(oracle_table(reasons))
    return 1 if failed else 0


def oracle_table(reasons: dict[str, int]) -> str:
    """The oracle shares as a markdown table: usable first, then each reason in `oracle.REASONS` order."""
    from swe_gym.oracle import REASONS

    total = sum(reasons.values())
    lines = ["| oracle | instances | share |", "|---|---|---|"]
    for name in ["usable", *REASONS, *sorted(set(reasons) - {"usable", *REASONS})]:
        if reasons.get(name):
            lines.append(f"| {name} | {reasons[name]} | {reasons[name] / total:.0%} |")
    return "\n".join(lines)


def prepare_one(task: Any, local: Any, validate_gold: bool) -> tuple[bool, str, str | None]:
    """Build one instance's snapshot, environment and oracle (and grade it untouched and gold); (ok, status line,
    `usable` or why the oracle is not; None where none was recorded)."""
    import asyncio

    from swe_gym.local import PrepError, prepare_env, prepare_snapshot
    from swe_gym.oracle import prepare_oracle

    row = task.row()
    reason = None
    try:
        snapshot = prepare_snapshot(local, row)
        venv = prepare_env(local, row, snapshot)
        status = f"ready ({venv.parent.name}/{venv.name})"
        if task.config.replay != "off":
            oracle = prepare_oracle(local, row, snapshot, task.config.test_timeout_s)
            reason = "usable" if oracle.usable else oracle.reason
            shown = f"{len(oracle.calls)} calls" if oracle.usable else f"{oracle.reason}; {oracle.detail}".rstrip("; ")
            status += f", oracle {reason if oracle.usable else 'unusable'} ({shown})"
        if not validate_gold:
            return True, status, reason
        if asyncio.run(validate(task)):
            return True, status + ", valid", reason
        return False, status + ", INVALID: resolved untouched or unresolved with the gold patch", reason
    except PrepError as exc:
        return False, f"FAILED: {exc}", reason
    except Exception as exc:  # noqa: BLE001 - one broken instance must not stop the batch
        return False, f"FAILED: {type(exc).__name__}: {exc}", reason


def fresh_box(task: Any, name: str) -> tuple[Any, Any]:
    """A new subprocess runtime (not started) with the task's environment, and an untrainable trace for the task."""
    import uuid

    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    runtime = make_runtime(vf.SubprocessConfig(), name=f"{name}-{uuid.uuid4().hex[:8]}")
    runtime.env = dict(task.runtime_env())
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig(runtime=vf.SubprocessConfig()), name=name, trainable=False),
    )
    return runtime, trace


async def validate(task: Any) -> bool:
    """The task's own verifiers `validate` hook on a fresh subprocess box: untouched fails, gold passes."""
    runtime, trace = fresh_box(task, "swe-gym-prepare")
    await runtime.start()
    try:
        await task.setup(trace, runtime)
        return await task.validate(runtime)
    finally:
        await runtime.stop()


if __name__ == "__main__":
    sys.exit(main())
