"""The cadence on a cluster: PRIME-RL trains from the `realtime-sessions` source, the runner ships on the cadence.

With `[prime_rl]` set, `composer-prime realtime` splits the loop across two processes:

- PRIME-RL, launched by the runner from a command template (`uv run rl @ {rl_toml}`) and kept running: its
  orchestrator draws bundles from the realtime-sessions taskset (the spool through its journal, `source.py`), the
  replay env turns each into an episode with one trace per session, and its trainer trains them under
  `composer_loss` and writes a filesystem broadcast `<output_dir>/<run_name>/broadcasts/step_N/` (then `STABLE`)
  per step.
- the runner: each cycle it takes the newest broadcast step, scores it with `eval.command`, runs the monitors over
  the bundles handed out since the previous cycle (the journal), and ships it through the relay when the gates
  pass: a copy under `<state_dir>/broadcasts/step_<version>/` and `/update_weights` to each `ship.admin_urls` entry,
  as the single-process loop does. The served version it writes to state.json is what the taskset ages sessions by.

`<state_dir>/rl.toml` is `[prime_rl.rl]` with a fixed run name and the realtime source's taskset filled in from this
config (`[spool]`, `[reward]`, `[staleness]`, `[pii]`, the journal beside PRIME-RL's run dir, state.json), plus
`[resume]` once PRIME-RL has a checkpoint, so a restarted runner resumes PRIME-RL from its last checkpoint and the
journal replays what PRIME-RL's resume discards (exactly-once, `source.py`). PRIME-RL's output goes to
`<state_dir>/rl.log`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.atomic import default_mode, write_atomic
from composer_prime.realtime.ingest.pruning import newest_step

TASKSET_ID = "realtime-sessions"


class PrimeRLConfig(BaseModel):
    """The train phase through PRIME-RL (a cluster); unset, the runner trains in-process (the CPU demo)."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(default_factory=lambda: ["uv", "run", "rl", "@", "{rl_toml}"])
    """argv that launches PRIME-RL; `{rl_toml}` becomes `<state_dir>/rl.toml` and `{output_dir}` the output dir."""
    cwd: Path | None = None
    """Where the command runs (the PRIME-RL checkout with composer-prime installed into its venv)."""
    output_dir: Path = Path("rl")
    """PRIME-RL's output dir; relative paths are under state_dir. The run writes to `<output_dir>/<run_name>/`
    (checkpoints, broadcasts); the source's journal is `<output_dir>/<run_name>-journal/`, outside the run dir, so
    that a fresh start of PRIME-RL (`clean`, no checkpoint yet) keeps it."""
    run_name: str = Field("realtime", pattern=r"^[A-Za-z0-9._-]+$")
    """PRIME-RL's `run.name`: fixed, so every launch resumes the same run."""
    step_wait_s: float = Field(600.0, ge=0)
    """A cycle waits this long for a broadcast step newer than the last shipped one, then holds without shipping."""
    settle_s: float = Field(0.0, ge=0)
    """Once a new step is there, a cycle takes the newest step after no newer one has appeared for this long. 0 (a
    cluster, where PRIME-RL trains without pause): the newest step at once. The CPU demo sets it, so that a cycle
    judges the step that trained the whole window its users just wrote, not the first half of it."""
    stop_timeout_s: float = Field(120.0, gt=0)
    """On exit the runner stops PRIME-RL (SIGTERM to its process group), then kills it after this long."""
    rl: dict[str, Any] = Field(default_factory=dict)
    """The PRIME-RL config, as `uv run rl @` reads it; one `[[orchestrator.train.source]]` has taskset id
    `realtime-sessions`, whose spool, reward, staleness, pii, journal and state_file the runner sets."""

    @model_validator(mode="after")
    def _check(self) -> PrimeRLConfig:
        sources = ((self.rl.get("orchestrator") or {}).get("train") or {}).get("source") or []
        ours = [s for s in sources if ((s.get("env") or {}).get("taskset") or {}).get("id") == TASKSET_ID]
        if len(ours) != 1:
            raise ValueError(
                f"prime_rl.rl: {len(ours)} [[orchestrator.train.source]] tables have taskset id "
                f"{TASKSET_ID!r}; the realtime train phase needs exactly one"
            )
        if ((self.rl.get("orchestrator") or {}).get("ckpt") or {}).get("skip_progress"):
            raise ValueError(
                "prime_rl.rl: orchestrator.ckpt.skip_progress = true makes a resume draw from the first "
                "task again, so the journal would replay bundles already trained; remove it"
            )
        if ours[0].get("group_size", 1) != 1:
            raise ValueError(
                f"prime_rl.rl: the {TASKSET_ID} source has group_size = {ours[0]['group_size']}; set "
                "group_size = 1 (a bundle of sessions is the group; copies of a replay carry no signal)"
            )
        return self


def run_paths(config: Any) -> tuple[Path, Path, Path]:
    """(PRIME-RL's output dir, its run dir, the source's journal) of `config` (a RealtimeConfig)."""
    prime = config.prime_rl
    out = prime.output_dir if prime.output_dir.is_absolute() else config.state_dir.resolve() / prime.output_dir
    return out, out / prime.run_name, out / f"{prime.run_name}-journal"


def rl_config(config: Any) -> dict[str, Any]:
    """`[prime_rl.rl]` with the run and the realtime source filled in from `config` (a RealtimeConfig): resume
    PRIME-RL's latest checkpoint when there is one, else start clean (the journal, outside the run dir, stays)."""
    output_dir, run_dir, journal = run_paths(config)
    rl = json.loads(json.dumps(config.prime_rl.rl))
    rl["output_dir"] = str(output_dir)
    rl["run"] = {**rl.get("run", {}), "name": config.prime_rl.run_name}
    for source in rl["orchestrator"]["train"]["source"]:
        taskset = source["env"]["taskset"]
        if taskset.get("id") != TASKSET_ID:
            continue
        taskset |= {
            "spool": config.spool.model_dump(mode="json", exclude_none=True),
            "reward": config.reward.model_dump(mode="json"),
            "staleness": config.staleness.model_dump(mode="json"),
            "pii": config.pii.model_dump(mode="json"),
            "monitors": config.monitors.model_dump(mode="json", exclude_none=True),
            "max_user_share": config.cadence.max_user_share,
            "max_group_share": config.cadence.max_group_share,
            "journal": str(journal),
            "state_file": str(config.state_dir.resolve() / "state.json"),
            "checkpoints": str(run_dir / "checkpoints"),  # the journal forgets what every kept checkpoint drew
        }
        if source.get("name"):
            taskset["checkpoint_env"] = source["name"]
    if any((run_dir / "checkpoints").glob("step_*")):
        rl["resume"] = {}  # the latest checkpoint
    elif pruned(journal):
        raise ValueError(
            f"PRIME-RL's run dir {str(run_dir)!r} has no checkpoint, but the journal {str(journal)!r} forgot bundles "
            f"1..{pruned(journal)} below the checkpoints it had: a fresh run would replay placeholders for them. "
            "Restore the run dir, or move the journal aside to start a new run from the spool's cursor"
        )
    elif run_dir.exists():
        rl["clean"] = True  # broadcasts of a run that never checkpointed: PRIME-RL starts over, the journal replays
    return rl


def pruned(journal: Path) -> int:
    """How many bundles the journal at `journal` has forgotten (`journal.Journal.prune`)."""
    state = journal / "state.json"
    return int(json.loads(state.read_text()).get("pruned", 0)) if state.exists() else 0


def latest_checkpoint(run_dir: Path) -> int | None:
    """The step PRIME-RL resumes from (its latest checkpoint dir), None when it has none."""
    steps = [
        int(p.name.removeprefix("step_"))
        for p in (run_dir / "checkpoints").glob("step_*")
        if p.name.removeprefix("step_").isdigit()
    ]
    return max(steps, default=None)


def drop_rolled_back(run_dir: Path, checkpoint: int) -> list[int]:
    """Remove the broadcast steps past `checkpoint`, the step PRIME-RL is about to resume from (-1: it starts over);
    their training is rolled back. PRIME-RL 559b447 rewrites those step dirs in place as it trains them again (its
    filesystem broadcast makes the dir with `exist_ok` and touches `STABLE` last), so the old `STABLE` would mark a
    half-rewritten step complete. `STABLE` goes first, then the dir. Returns the steps removed."""
    removed = []
    for path in (run_dir / "broadcasts").glob("step_*"):
        step = path.name.removeprefix("step_")
        if step.isdigit() and int(step) > checkpoint:
            (path / "STABLE").unlink(missing_ok=True)
            shutil.rmtree(path)
            removed.append(int(step))
    return sorted(removed)


ERRORS = {"type": True}
TRACE_FIELDS = {
    "id": True,
    "rewards": True,
    "metrics": True,
    "is_completed": True,
    "ok": True,
    "stop_condition": True,
    "errors": ERRORS,
    "timing": True,
    "task": {"type": True, "key": True, "data": {"idx": True, "name": True, "bundle": True, "replay": True}},
    "info": {"realtime": {"bundle": True, "session_id": True, "policy_version": True, "age": True, "reward": True}},
}
ROLLOUT_FIELDS = {
    "id": True,
    "env": True,
    "group": True,
    "run": True,
    "ok": True,
    "errors": ERRORS,
    "task": TRACE_FIELDS["task"],
    "traces": TRACE_FIELDS,
}
"""What stays of a PRIME-RL rollout record once its step is judged: names, ids, rewards, metrics, timings and error
types. Token streams, messages, the bundle's sessions, users, repositories, edited paths and error messages (which
may quote any of them) go."""


def _keep(value: Any, fields: Any) -> Any:
    if fields is True:
        return value
    if isinstance(value, list):
        return [_keep(item, fields) for item in value]
    if not isinstance(value, dict):
        return None
    return {k: _keep(v, fields[k]) for k, v in value.items() if k in fields}


def redact_rollouts(run_dir: Path, upto: int) -> list[int]:
    """Rewrite PRIME-RL's episode logs (`<run dir>/rollouts/step_N/**/traces.jsonl`, its file monitor's) of the steps
    up to `upto` down to `ROLLOUT_FIELDS`: they hold every trained session's token streams verbatim. Each file is
    replaced in one rename, then the step is marked `REDACTED`; a file PRIME-RL appended to after the mark (a late
    eval) is rewritten again. Returns the steps rewritten."""
    done = []
    for step_dir in (run_dir / "rollouts").glob("step_*"):
        step = step_dir.name.removeprefix("step_")
        if not step.isdigit() or int(step) > upto:
            continue
        mark = step_dir / "REDACTED"
        since = mark.stat().st_mtime_ns if mark.exists() else -1
        stale = [p for p in step_dir.rglob("traces.jsonl") if p.stat().st_mtime_ns > since]
        if not stale and since >= 0:
            continue
        for path in stale:
            lines = []
            with path.open(errors="replace") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue  # a line cut by a crash mid-append: nothing to keep
                    lines.append(json.dumps(_keep(record, ROLLOUT_FIELDS)) + "\n")
            write_atomic(path, "".join(lines))
        mark.touch()
        done.append(int(step))
    return sorted(done)


def copy_step(step_dir: Path, broadcasts: Path, version: int, link: bool = False) -> Path:
    """A step dir as `broadcasts/step_<version>/` under `broadcasts` (the state dir: the relay origin's input; a
    cycle's dir: its candidate): copied under a temp name (hard-linked with `link`, for a dir of the runner's own that
    nothing rewrites), renamed, then `STABLE` (idempotent)."""
    target = broadcasts / "broadcasts" / f"step_{version}"
    if (target / "STABLE").exists():
        return target
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(
        step_dir, tmp, ignore=shutil.ignore_patterns("STABLE"), copy_function=os.link if link else shutil.copy2
    )
    for path in tmp.rglob("*"):  # readable by the relay origin and the servers, whatever mode PRIME-RL wrote
        path.chmod(default_mode() | 0o111 if path.is_dir() else default_mode())
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    (target / "STABLE").touch()
    return target


class PrimeRLExited(RuntimeError):
    """PRIME-RL stopped; the message names its exit status and log."""


class PrimeRL:
    """The PRIME-RL process the runner keeps running."""

    def __init__(self, config: Any, log: Any):
        self.config = config
        self.prime = config.prime_rl
        self.log = log
        state_dir = self.state_dir = config.state_dir.resolve()
        self.output_dir, self.run_dir, self.journal = run_paths(config)
        self.rl_toml = state_dir / "rl.toml"
        self.log_path = state_dir / "rl.log"
        self.process: subprocess.Popen | None = None
        self.resumes_from: int | None = None
        """The checkpoint step the launched PRIME-RL resumes from (None: it starts over)."""

    def start(self) -> None:
        import tomli_w

        self.output_dir.mkdir(parents=True, exist_ok=True)
        rl = rl_config(self.config)
        write_atomic(self.rl_toml, tomli_w.dumps(rl))
        self.resumes_from = latest_checkpoint(self.run_dir) if "resume" in rl else None
        # Resuming, the steps past the checkpoint are rolled back; starting over, every step of the earlier run is
        # (PRIME-RL removes them itself, but only once its launcher is up: a runner looking first would judge them).
        floor = -1 if self.resumes_from is None else self.resumes_from
        dropped = drop_rolled_back(self.run_dir, floor)
        if dropped:
            start = "starts over" if self.resumes_from is None else f"resumes from step {self.resumes_from}"
            self.log(f"prime-rl: {start}; removed rolled-back broadcasts {dropped}")
        for pin in (self.state_dir / "cycles").glob("*/judged.json"):  # a crashed cycle's step, rolled back
            if json.loads(pin.read_text())["rl_step"] > floor:
                shutil.rmtree(pin.parent / "candidate", ignore_errors=True)
                pin.unlink()  # the cycle judges PRIME-RL's retrained weights, not its copy of the old ones
        fill = {"{rl_toml}": str(self.rl_toml), "{output_dir}": str(self.output_dir)}
        argv = [fill.get(arg, arg) for arg in self.prime.command]
        self.log(f"prime-rl: {' '.join(argv)} (log: {self.log_path})")
        with self.log_path.open("ab") as out:
            try:
                self.process = subprocess.Popen(
                    argv, cwd=self.prime.cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            except OSError as err:
                raise PrimeRLExited(f"prime_rl.command {argv[0]!r} did not start: {err}") from None

    def check(self) -> None:
        code = None if self.process is None else self.process.poll()
        if code is not None:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise PrimeRLExited(
                f"PRIME-RL exited with status {code} (log {self.log_path}); a restart of the runner "
                f"resumes it from its last checkpoint. Log tail:\n{tail}"
            )

    def wait_for_step(self, after: int | None) -> int | None:
        """The newest broadcast step past `after` (None: no step judged yet), waiting up to `step_wait_s` for one and
        then until no newer one has appeared for `settle_s`.
        PRIME-RL 559b447's trainer broadcasts its startup weights as step `start - 1` before training
        (`trainer/rl/train.py`): `step_0` on a fresh run, the version-0 model, never a candidate (a resume's is the
        checkpoint's step, which `after` already covers)."""
        deadline = time.monotonic() + self.prime.step_wait_s
        floor = 0 if after is None else after
        found, since = None, 0.0
        while True:
            self.check()
            step = newest_step(self.run_dir)
            now = time.monotonic()
            if step is not None and step > floor and step != found:
                found, since = step, now
            if found is not None and now - since >= self.prime.settle_s:
                return found
            if found is None and now >= deadline:
                return None
            wait = since + self.prime.settle_s - now if found is not None else deadline - now
            time.sleep(min(1.0, max(0.0, wait)))

    def stop(self) -> None:
        """SIGTERM to PRIME-RL's process group, SIGKILL after `stop_timeout_s`; then SIGKILL to whatever of the
        processes below it is left (torch elastic starts its ranks in sessions of their own, outside the group)."""
        from composer_prime.process.children import descendants

        if self.process is None or self.process.poll() is not None:
            return
        below = descendants(self.process.pid) if sys.platform == "linux" else set()
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(self.prime.stop_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def handed_since(path: Path, after: int) -> tuple[int, list[Any], dict[str, int]]:
    """The bundles of the journal at `path` after `after`: (bundles handed in all, their sessions, their counts)."""
    from composer_prime.realtime import durable
    from composer_prime.realtime.ingest.journal import BundleData, Journal

    journal = Journal(path)
    handed = journal.load().handed
    episodes: list[Any] = []
    counts: Counter = Counter()
    for seq in range(after + 1, handed + 1):
        data = durable.load(BundleData, journal.bundle_path(seq))
        episodes.extend(data.sessions)
        counts.update(data.counts)
    return handed, episodes, dict(counts)
