"""The cadence: ingest -> train N steps -> evaluate held-out -> ship through the relay if the gates pass -> repeat
every T minutes, resumable after a crash at any point.

Durable state lives in `state_dir`:

    state.json                  last completed cycle, served version, its held-out score, checkpoint, history
    state.lock                  held by the one runner (filelock); a second runner stops with an error
    cycles/<n>/served.json      (demo) the serving window the simulated users produced before cycle n
    cycles/<n>/batch.json       the cursor after cycle n's read, its episodes, counts and rejected lines
    cycles/<n>/checkpoint/      trainer state after cycle n (fp32 weights + optimizer), renamed into place
    cycles/<n>/report.json      the cycle's report (also appended to state.json's history)
    ids/<day>.ids               the session-id memory the newest batch's cursor covers (`seen.py`)
    broadcasts/step_<v>/        shipped versions, PRIME-RL's filesystem broadcast layout (the relay origin's input)

Each phase writes its output atomically before the next starts, and on restart a phase whose output exists is not
run again: the batch of cycle n is read once (its cursor commits with it, so the spool is never re-read for it),
trained into the checkpoint once (a crash mid-training restarts from cycle n-1's checkpoint on the same batch), and
shipping is idempotent (a broadcast step with `STABLE` is kept; the update request is repeated). So every session
is trained exactly once in the lineage of the shipped policy.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from composer_prime.realtime import durable
from composer_prime.realtime.cycle.config import RealtimeConfig
from composer_prime.realtime.ingest.join import Episode, assign_advantages, build_episodes, cap_shares
from composer_prime.realtime.ingest.seen import SeenIds, sweep
from composer_prime.realtime.ingest.spool import Cursor, advance
from composer_prime.realtime.ingest.staleness import Steps, classify
from composer_prime.realtime.monitors import alerts
from composer_prime.realtime.monitors.pii import Scrubber


class State(BaseModel):
    cycle: int = 0
    """Last completed cycle."""
    version: int = 0
    """Policy version being served."""
    heldout: float | None = None
    """Held-out score of the served version."""
    checkpoint: str | None = None
    """Trainer checkpoint to resume from, relative to the state dir (None: the version-0 model)."""
    history: list[dict[str, Any]] = Field(default_factory=list)
    step: int = 0
    """The trainer's step: optimizer steps trained so far (single-process), or the last PRIME-RL step judged
    (cluster). Sessions are aged against it (`staleness.Steps`)."""
    version_steps: dict[int, int] = Field(default_factory=lambda: {0: 0})
    """The trainer step each shipped version's weights were trained to."""
    rl_step: int | None = None
    """(cluster) The last PRIME-RL broadcast step a cycle judged."""
    handed: int = 0
    """(cluster) Bundles of the realtime-sessions journal the cycles so far have reported on."""

    def steps(self) -> Steps:
        return Steps(now=self.step, versions=dict(self.version_steps))


class Batch(BaseModel):
    cursor: Cursor
    episodes: list[Episode]
    counts: dict[str, int]
    rejected: list[dict[str, Any]]
    train: bool


class EvalError(RuntimeError):
    """The held-out evaluation command failed; the message says how."""


class LockedError(RuntimeError):
    """Another runner holds the state dir."""


def cycle_dir(state_dir: Path, n: int) -> Path:
    return state_dir / "cycles" / f"{n:06d}"


def ingest(config: RealtimeConfig, state: State, n: int, now: float) -> Batch:
    """Read the spool after cycle n-1's cursor; build cycle n's episodes (with those cycle n-1 carried over)."""
    previous = cycle_dir(config.state_dir, n - 1) / "batch.json"
    carried: list[Episode] = []
    cursor = Cursor()
    if previous.exists():
        last = durable.load(Batch, previous)
        cursor = last.cursor
        carried = [] if last.train else last.episodes
    step = advance(cursor, config.spool, now, SeenIds(config.state_dir / "ids", cursor.ids))
    steps = state.steps()
    episodes, counts = build_episodes(
        step.ready,
        steps,
        config.reward,
        config.staleness,
        Scrubber(config.pii),
        config.monitors.edits_disable_tests.dynamic,
    )
    for e in carried:  # aged again: the trainer has not moved, but a ship may have recorded newer weights
        e.age = steps.age(e.policy_version)
        verdict = classify(e.age, config.staleness)
        if verdict in ("drop", "future_version"):
            counts["stale_dropped" if verdict == "drop" else "future_version"] += 1
        else:
            e.importance_weighted = verdict == "weight"
            episodes.append(e)
    episodes, counts["quarantined"] = alerts.quarantine(config.monitors, episodes)
    episodes, capped = cap_shares(episodes, config.cadence.max_user_share, config.cadence.max_group_share)
    counts.update(capped)
    total = Counter(step.counts) + counts
    train = len(episodes) >= config.cadence.min_episodes
    if train:
        assign_advantages(episodes, config.cadence.min_group)
    return Batch(cursor=step.cursor, episodes=episodes, counts=dict(total), rejected=step.rejected, train=train)


def read_batch(config: RealtimeConfig, state: State, n: int, clock: Callable[[], float]) -> Batch:
    """Cycle n's batch: read once from the spool and committed with its cursor (`cycles/<n>/batch.json`), or the one
    a run before a restart committed."""
    path = cycle_dir(config.state_dir, n) / "batch.json"
    if path.exists():
        return durable.load(Batch, path)
    batch = ingest(config, state, n, clock())
    durable.save(path, batch)
    sweep(config.state_dir / "ids", batch.cursor.ids)
    return batch


def forget_tokens(batch: Batch, path: Path) -> None:
    """Once the checkpoint has committed a batch's training, rewrite its batch.json without the token streams: what
    trained is not kept on disk verbatim (the reports and monitors need only the episodes' figures)."""
    if any(e.samples for e in batch.episodes):
        for e in batch.episodes:
            e.samples = []
        durable.save(path, batch)


class ShipError(RuntimeError):
    """A relay proxy did not take the new version; the restart repeats the (idempotent) ship."""


def notify(urls: list[str], step_dir: Path, timeout_s: float, token: str | None = None) -> None:
    """PRIME-RL's weight update, to each relay client proxy: /pause, /update_weights, /resume, with the proxies' admin
    token as PRIME-RL sends its API key (`Authorization: Bearer`). `weight_dir` is sent absolute (the proxy resolves
    it in its own working dir). When the update fails after the pause, the proxy is told to /resume before the error
    is raised, so the fleet goes on serving the version it had."""
    import httpx

    weight_dir = str(step_dir.resolve())
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def post(url: str, route: str, body: dict | None) -> None:
        try:
            response = httpx.post(f"{url.rstrip('/')}{route}", json=body, timeout=timeout_s, headers=headers)
        except httpx.HTTPError as err:
            raise ShipError(
                f"ship.admin_urls: {url}{route} did not answer ({type(err).__name__}: {err}); start "
                "the relay client there (docs/relay.md) and rerun: the cycle resumes at its ship"
            ) from None
        if response.status_code != 200:
            raise ShipError(
                f"ship.admin_urls: {url}{route} answered {response.status_code}: "
                f"{response.text[:300]}; rerun once it is fixed: the cycle resumes at its ship"
            )

    for url in urls:
        post(url, "/pause", None)
        try:
            post(url, "/update_weights", {"weight_dir": weight_dir})
        except ShipError:
            try:
                post(url, "/resume", None)  # serving the previous version beats a paused fleet
            except ShipError:
                pass  # the update's error is the one to report; the rerun repeats pause, update and resume
            raise
        post(url, "/resume", None)


class Runner:
    """One realtime loop over `config.state_dir`."""

    def __init__(
        self, config: RealtimeConfig, log: Callable[[str], None] = print, clock: Callable[[], float] = time.time
    ):
        self.config = config
        self.log = log
        self.clock = clock
        self.dir = config.state_dir
        self.state_path = self.dir / "state.json"

    def _save(self, state: State) -> None:
        durable.save(self.state_path, state, indent=1)

    def run(self) -> State:
        from filelock import FileLock, Timeout

        self.dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.dir / "state.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise LockedError(
                f"state_dir {str(self.dir)!r} is in use by another `composer-prime realtime` run; stop "
                "it or give another --state-dir"
            ) from None
        try:
            return self._loop()
        finally:
            lock.release()

    def _loop(self) -> State:
        config = self.config
        state = durable.load(State, self.state_path) if self.state_path.exists() else State()
        if config.prime_rl is not None:
            return self._cluster_loop(state)
        from composer_prime.realtime.cycle.policy import Policy

        product = None
        model_dir = config.model_dir
        if config.demo is not None:
            import torch

            from composer_prime.realtime.cycle import demo

            torch.set_num_threads(config.demo.threads)
            model_dir = model_dir or self.dir / "policy-v0"
            if config.demo.prime_rl is not None:
                model_dir = model_dir.resolve()  # PRIME-RL's processes run in the state dir
            config.pii.tokenizer = config.pii.tokenizer or str(model_dir)
            if not (model_dir / "config.json").exists():
                self.log("demo: building and warm-starting the tiny policy")
                demo.build_policy(model_dir, config.demo.seed, population=config.demo.population)
            demo.check_population(model_dir, config.demo, self.dir)
            config.spool.dir.mkdir(parents=True, exist_ok=True)
            product = demo.Product(model_dir, self.dir, config.spool.dir, config.demo)
            if config.demo.prime_rl is not None:
                return self._demo_prime_rl(state, model_dir, product)
        assert model_dir is not None
        policy = Policy(model_dir, config.trainer, config.loss)
        policy.broadcast(self.dir, 0)  # version 0 as the relay's first keyframe (later versions ship as deltas on it)
        if state.checkpoint is not None:
            policy.load(self.dir / state.checkpoint)
        if state.cycle == 0 and state.heldout is None:
            state.heldout = self.evaluate(policy, product, 0)
            self._save(state)
        return self._cadence(state, lambda s: self.cycle(s, policy, product))

    def _cadence(self, state: State, cycle: Callable[[State], State]) -> State:
        config = self.config
        while config.cadence.cycles == 0 or state.cycle < config.cadence.cycles:
            started = time.monotonic()
            state = cycle(state)
            wait = 60.0 * config.cadence.interval_min - (time.monotonic() - started)
            if wait > 0 and (config.cadence.cycles == 0 or state.cycle < config.cadence.cycles):
                self.log(f"next cycle in {wait / 60:.1f} min")
                time.sleep(wait)
        return state

    def _demo_prime_rl(self, state: State, model_dir: Path, product: Any) -> State:
        """The CPU demo trained by PRIME-RL's own `rl` (`cpu.py`): the cluster loop, with the demo's users writing
        the spool each cycle and its held-out score as the evaluation."""
        from composer_prime.realtime.cycle import cpu

        config = self.config
        self.log("demo: preparing PRIME-RL's rl on this CPU (the smoke's patched copy and venvs)")
        spool = config.spool.model_copy(update={"dir": config.spool.dir.resolve()})
        self.config = config.model_copy(
            update={"spool": spool, "prime_rl": cpu.prime_rl_config(config, model_dir, self.log)}
        )
        if state.cycle == 0 and state.heldout is None:
            state.heldout = product.heldout(product.served(0))
            self._save(state)
        return self._cluster_loop(state, product)

    def _cluster_loop(self, state: State, product: Any = None) -> State:
        from composer_prime.realtime.cycle.cluster import PrimeRL, redact_rollouts

        if not self.state_path.exists():
            self._save(state)  # the taskset reads the served version from it
        prime = PrimeRL(self.config, self.log)
        prime.start()
        if state.rl_step:  # a runner stopped between its state save and the redaction
            redact_rollouts(prime.run_dir, state.rl_step)
        if prime.resumes_from is not None and (state.rl_step or 0) > prime.resumes_from:
            state = state.model_copy(
                update={"rl_step": prime.resumes_from, "step": prime.resumes_from}
            )  # trained again
        try:
            return self._cadence(state, lambda s: self.cluster_cycle(s, prime, product))
        finally:
            prime.stop()

    def cluster_cycle(self, state: State, prime: Any, product: Any = None) -> State:
        """One cycle over PRIME-RL's newest weights (cluster.py): evaluate, monitor, gate, ship. With the demo's
        `product`, its users first write a serving window from the served version, and its held-out score is the
        evaluation."""
        from composer_prime.realtime.cycle.cluster import copy_step, handed_since, redact_rollouts

        config = self.config
        n = state.cycle + 1
        cdir = cycle_dir(self.dir, n)
        cdir.mkdir(parents=True, exist_ok=True)
        for stale in cdir.parent.glob("*/candidate"):  # an earlier cycle's, left by a crash after it committed
            if stale.parent != cdir:
                shutil.rmtree(stale, ignore_errors=True)
        t0 = time.monotonic()
        served: dict[str, Any] = {}
        if product is not None:
            served_path = cdir / "served.json"
            if not served_path.exists():
                durable.save(served_path, product.serve_window(n, state.version, self.clock()))
            served = durable.load_json(served_path)
        step, candidate = self.candidate(prime, state, cdir)
        handed, episodes, counts = handed_since(prime.journal, state.handed)
        trained = step is not None
        report: dict[str, Any] = {
            "cycle": n,
            "served_version": state.version,
            **served,
            "counts": counts,
            "episodes": len(episodes),
            "users": len({e.user for e in episodes}),
            "reward_mean": sum(e.reward for e in episodes) / len(episodes) if episodes else 0.0,
            "train": {"rl_step": step, "bundles": handed - state.handed} if trained else None,
        }
        step_dir = candidate
        heldout = None
        if trained and product is not None:
            heldout = product.heldout(product.load(step_dir))
        elif trained and config.eval.command:
            heldout = self.eval_command(step_dir, config.model_dir, n)
        ship = self._judge(state, report, episodes, heldout, trained)
        state = self._close(
            state,
            n,
            t0,
            report,
            ship,
            heldout,
            lambda v: copy_step(step_dir, self.dir, v, link=True),
            rl_step=step if trained else state.rl_step,
            step=step if trained else state.step,
            handed=handed,
        )
        if trained:  # its sessions' token streams leave PRIME-RL's episode logs with the cycle
            redact_rollouts(prime.run_dir, step)
        shutil.rmtree(cdir / "candidate", ignore_errors=True)  # shipped, it is linked under broadcasts/
        return state

    def candidate(self, prime: Any, state: State, cdir: Path) -> tuple[int | None, Path | None]:
        """The step cycle `cdir` judges and its own copy of it (None, None: no new step in time).

        PRIME-RL's trainer deletes a step dir two steps later (`maybe_clean`), so an evaluation that outlasts two
        steps would lose its weights: the cycle evaluates and ships its candidate, copied under `cdir` right after
        the step is chosen. The choice is pinned (`judged.json`) before the copy, so a rerun after a crash judges
        and ships the same weights, never a newer step under a version a crashed run already shipped; a PRIME-RL
        (re)start unpins the steps it rolls back (`PrimeRL.start`)."""
        from composer_prime.realtime.cycle.cluster import copy_step

        pin = cdir / "judged.json"
        while True:
            if pin.exists():
                step = durable.load_json(pin)["rl_step"]
            else:
                step = prime.wait_for_step(state.rl_step)
                if step is None:
                    return None, None
                durable.save(pin, {"rl_step": step})
            source = prime.run_dir / "broadcasts" / f"step_{step}"
            copied = cdir / "candidate" / "broadcasts" / f"step_{step}"
            if (copied / "STABLE").exists() or (source / "STABLE").exists():
                return step, copy_step(source, cdir / "candidate", step)
            pin.unlink()  # PRIME-RL cleaned the pinned step before a crashed run copied it: judge its newest

    def _close(
        self,
        state: State,
        n: int,
        t0: float,
        report: dict[str, Any],
        ship: bool,
        heldout: float | None,
        publish: Callable[[int], Path],
        **changes: Any,
    ) -> State:
        """End cycle `n` (both loops): ship the next version when the gates passed (`publish(version)` writes its step
        dir; the relay clients are told), write the cycle's report, save and return the new state."""
        version = state.version
        version_steps = state.version_steps
        if ship:
            version += 1
            version_steps = {**version_steps, version: changes.get("step", state.step)}
            shipped = publish(version)
            if self.config.ship.admin_urls:
                ship_config = self.config.ship
                notify(ship_config.admin_urls, shipped, ship_config.timeout_s, ship_config.admin_token())
        report["version"] = version
        report["trainer_step"] = changes.get("step", state.step)
        report["seconds"] = time.monotonic() - t0
        durable.save(cycle_dir(self.dir, n) / "report.json", report, indent=1)
        self.log(summary_line(report))
        state = state.model_copy(
            update={
                "cycle": n,
                "version": version,
                "heldout": heldout if ship else state.heldout,
                "version_steps": version_steps,
                "history": [*state.history, report],
                **changes,
            }
        )
        self._save(state)
        return state

    def _judge(
        self, state: State, report: dict[str, Any], episodes: list[Any], heldout: float | None, trained: bool
    ) -> bool:
        """Held-out score, monitors and gate into `report`; whether the candidate ships."""
        config = self.config
        report["heldout"] = heldout
        report["heldout_served"] = state.heldout
        if episodes:
            report["median_tokens"] = statistics.median(e.sampled_tokens for e in episodes)
        history = [
            {"reward": h["reward_mean"], "heldout": h["heldout"], "median_tokens": h.get("median_tokens")}
            for h in [*state.history, report]
            if h.get("train") is not None
        ]
        quarantined = report["counts"].get("quarantined", 0)
        raised = alerts.check(config.monitors, episodes, history, quarantined) if trained or quarantined else []
        report["alerts"] = [a.as_dict() for a in raised]
        gate = state.heldout is None or heldout is None or heldout >= state.heldout - config.gates.heldout_max_drop
        report["gate_heldout"] = gate
        report["shipped"] = trained and gate and not any(a.pause for a in raised)
        return report["shipped"]

    def evaluate(self, policy: Any, product: Any, n: int) -> float | None:
        """The held-out score of the policy being trained: the demo's own, `eval.command`'s, or None."""
        if product is not None:
            return product.heldout(policy.model)
        if not self.config.eval.command:
            return None
        return self.eval_command(policy.broadcast(cycle_dir(self.dir, n) / "candidate", n), policy.model_dir, n)

    def eval_command(self, step_dir: Path, model_dir: Path | None, n: int) -> float:
        """`eval.command`'s score of the weights in `step_dir`."""
        import subprocess

        fill = {"{weights}": str(step_dir), "{model_dir}": str(model_dir or ""), "{cycle}": str(n)}
        argv = [fill.get(arg, arg) for arg in self.config.eval.command]
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.config.eval.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise EvalError(f"eval.command {argv[0]!r} did not run to the end: {err}") from None
        lines = result.stdout.strip().splitlines()
        try:
            if result.returncode != 0:
                raise ValueError(f"exit status {result.returncode}")
            return float(json.loads(lines[-1])["score"])
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise EvalError(
                f'eval.command must exit 0 and print {{"score": <float>}} as its last line ({err}); '
                f"stderr: {result.stderr[-500:]}"
            ) from None

    def cycle(self, state: State, policy: Any, product: Any) -> State:
        config = self.config
        n = state.cycle + 1
        cdir = cycle_dir(self.dir, n)
        cdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        report: dict[str, Any] = {"cycle": n, "served_version": state.version}
        if product is not None:
            served = cdir / "served.json"
            if not served.exists():
                durable.save(served, product.serve_window(n, state.version, self.clock()))
            report |= durable.load_json(served)
        batch = read_batch(config, state, n, self.clock)
        episodes = batch.episodes
        report["counts"] = batch.counts
        report["episodes"] = len(episodes)
        report["reward_mean"] = sum(e.reward for e in episodes) / len(episodes) if episodes else 0.0
        report["users"] = len({e.user for e in episodes})
        ckpt = cdir / "checkpoint"
        if batch.train:
            train_path = cdir / "train.json"
            if ckpt.exists():  # the rename of the checkpoint commits the training of this cycle
                policy.load(ckpt)
            else:
                figures = policy.train(episodes, config.cadence.steps, config.staleness.max_weight)
                durable.save(train_path, figures)
                policy.save(ckpt)
            forget_tokens(batch, cdir / "batch.json")
            report["train"] = durable.load_json(train_path)[-1]
        else:
            report["train"] = None
            self.log(
                f"cycle {n}: {len(episodes)} episodes < cadence.min_episodes = {config.cadence.min_episodes}; "
                "carried to the next cycle"
            )
            if not episodes and batch.counts.get("stale_dropped"):
                self.log(
                    f"cycle {n}: all {batch.counts['stale_dropped']} sessions were served more than "
                    f"staleness.max_age = {config.staleness.max_age} trainer steps ago (the fleet serves "
                    f"v{state.version}, the trainer is at step {state.step}): nothing trains until a version "
                    "ships or --staleness.max-age is raised (or --staleness.mode importance_weight)"
                )
        heldout = self.evaluate(policy, product, n)
        ship = self._judge(state, report, episodes, heldout, batch.train)
        state = self._close(
            state,
            n,
            t0,
            report,
            ship,
            heldout,
            lambda v: policy.broadcast(self.dir, v),
            checkpoint=str(ckpt.relative_to(self.dir)) if batch.train else state.checkpoint,
            step=state.step + config.cadence.steps if batch.train else state.step,
        )
        prune_checkpoints(self.dir, state)
        return state


def prune_checkpoints(state_dir: Path, state: State) -> None:
    """Remove every cycle's checkpoint but the one `state.json` resumes from (a restart, or a crash mid-cycle, needs
    only that one). Each is renamed to a dot-name first, so no half-removed checkpoint is left under its own name."""
    keep = state_dir / state.checkpoint if state.checkpoint else None
    for ckpt in sorted((state_dir / "cycles").glob("*/checkpoint")):
        if ckpt != keep:
            doomed = ckpt.with_name(".checkpoint.pruned")
            ckpt.rename(doomed)
            shutil.rmtree(doomed)
    for doomed in (state_dir / "cycles").glob("*/.checkpoint.pruned"):  # left by a crash mid-removal
        shutil.rmtree(doomed)


def summary_line(r: dict[str, Any]) -> str:
    counts = r["counts"]
    skipped = {k: v for k, v in counts.items() if k not in ("sessions", "signals", "fresh", "backlog_reads") and v}
    user = f" user_reward {r['user_reward']:+.2f}" if "user_reward" in r else ""
    status = f"shipped v{r['version']}" if r["shipped"] else f"held at v{r['version']}"
    alerts = "; ".join(a["monitor"] for a in r["alerts"])
    return (
        f"cycle {r['cycle']}: served v{r['served_version']}{user} | {r['episodes']} episodes, reward "
        f"{r['reward_mean']:+.2f}, skipped {skipped or 'none'} | held-out "
        f"{'-' if r['heldout'] is None else format(r['heldout'], '.3f')} | {status}"
        + (f" | alerts: {alerts}" if alerts else "")
    )
