"""`realtime-sessions`: the session-log spool as an infinite verifiers v1 taskset that PRIME-RL's orchestrator
trains from (docs/realtime.md, "The PRIME-RL source").

PRIME-RL trains only the episodes its orchestrator dispatches: a train source's taskset gives a task, an env server
runs it, the train sink turns the episode's traces into samples. This taskset is `INFINITE`: its stream
(`BundleStream`) reads the spool through the durable cursor (`spool.advance`), turns ready sessions into episodes
(`join.build_episodes`: PII hooks, the reward model, staleness judged against the served version before anything is
yielded) and yields them in bundles, one task per bundle of `bundle_size` sessions of one baseline group (a `group`
the product sets, or the sessions read together when no group has enough). While no bundle is ready the stream raises
`TaskNotReady` instead of waiting, which composer-prime's seam lets PRIME-RL's `TrainSource` answer as "source empty for
now" (`composer_prime/seam/train_source.py`), so the orchestrator's event loop never waits for live data. The replay env
and harness (`replay.py`) answer a bundle without calling a model: one trace per session, its logged token stream with
the serving logprobs, its reward on `trace.rewards`. With `group_size = 1` the bundle is the group, so the composer
algorithm's baseline is the bundle's mean reward, as `join.assign_advantages` computes it for the single-process
trainer.

The hand-out journal (`journal`) makes the source exactly-once against PRIME-RL's own checkpoints:

    journal/state.json          the cursor after the last read, sessions read but not yet bundled (`staged`), the
                                number of bundles handed out, counts
    journal/ids/<day>.ids       the session-id memory the cursor covers (`seen.py`)
    journal/bundles/<seq>.json  every bundle handed out, in order (forgotten below PRIME-RL's oldest checkpoint)
    journal/reads/<k>.json      the counts and rejected lines of each read that found something (the newest
                                `keep_reads`)
    journal/lock                one reader at a time

A read's bundles are written, then `state.json` (atomically, with the cursor that covers them), then yielded. PRIME-RL
checkpoints how many tasks its sampler drew and, on resume, draws and discards that many from a fresh iterator. So
the stream first replays the journal's bundles in order, then reads on from the cursor: PRIME-RL discards the
bundles drawn before its checkpoint and trains the rest again, unchanged, before new sessions. No spool line is read
twice and no bundle is trained twice in the lineage of a checkpoint; the bundles in flight when the resumed
checkpoint was written are discarded with it (at-most-once for those, as for PRIME-RL's own tasks).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.realtime import durable
from composer_prime.realtime.join import Episode, build_episodes, cap_share
from composer_prime.realtime.monitors import MonitorsConfig, quarantine
from composer_prime.realtime.pii import PIIConfig, Scrubber
from composer_prime.realtime.pruning import Floor, check_pruned
from composer_prime.realtime.readiness import TaskNotReady
from composer_prime.realtime.reward import RewardModelConfig
from composer_prime.realtime.seen import SeenIds
from composer_prime.realtime.spool import Cursor, SpoolConfig, advance
from composer_prime.realtime.staleness import StalenessConfig, Steps, classify

logger = logging.getLogger(__name__)

TASKSET_ID = "realtime-sessions"
READ_SLICE = 256
"""Released sessions turned into episodes and bundles at a time (`Journal.read`)."""
METRIC_PREFIX = "composer/realtime"


class RealtimeSessionsConfig(vf.TasksetConfig):
    """`[orchestrator.train.source.env.taskset]` of a realtime train source; `composer-prime realtime` fills the
    spool, reward, staleness, pii and version fields from its own config on a cluster run."""

    spool: SpoolConfig = SpoolConfig()
    """The session-log spool (as `[spool]` of `composer-prime realtime`)."""
    reward: RewardModelConfig = RewardModelConfig()
    """The reward model over signals."""
    staleness: StalenessConfig = StalenessConfig()
    """Sessions served by an old policy; judged when a bundle is cut, against the served version."""
    pii: PIIConfig = PIIConfig()
    """Scrubbing hooks, run on every session before it becomes an episode."""
    monitors: MonitorsConfig = MonitorsConfig()
    """The monitors' settings: with `edits_disable_tests.action = "pause"`, rewarded sessions that disabled tests are
    quarantined (never bundled)."""
    max_user_share: float = Field(1.0, gt=0, le=1)
    """At most this share of one read's sessions from one user (`user_capped`); 1.0: no cap."""
    max_group_share: float = Field(1.0, gt=0, le=1)
    """At most this share of one read's sessions from one `group` (`group_capped`); 1.0: no cap."""
    journal: Path = Path("realtime-journal")
    """The hand-out journal: cursor, staged sessions and every bundle handed out. Keep one per PRIME-RL output dir
    (its checkpoints count the bundles drawn from this journal)."""
    bundle_size: int = Field(8, ge=2)
    """Sessions per bundle (one PRIME-RL group): their mean reward is the baseline of each."""
    served_version: int = Field(0, ge=0)
    """The policy version the fleet serves when `state_file` is unset; each version then counts as one trainer step
    (sessions are aged in trainer steps, `staleness.Steps`)."""
    state_file: Path | None = None
    """`composer-prime realtime`'s state.json: when set, the trainer step each shipped version was trained to
    (`version_steps`) and the last step judged are read from it each time a bundle is cut; the trainer's step now is
    the newer of that and PRIME-RL's newest broadcast step (beside `checkpoints`)."""
    checkpoints: Path | None = None
    """PRIME-RL's checkpoint dir of the run this journal feeds (`<run dir>/checkpoints`; `composer-prime realtime` sets
    it). Set, the journal forgets the bundles every kept checkpoint has drawn (up to the oldest one's draw count, and
    only bundles the runner has reported on, per `state_file`), and refuses to start when PRIME-RL has no checkpoint
    at or past what it forgot. Unset, it keeps every bundle."""
    checkpoint_env: str | None = None
    """This source's name in PRIME-RL's checkpoints (its `[[orchestrator.train.source]] name`); None: the only train
    source there."""
    poll_s: float = Field(5.0, gt=0)
    """Seconds between reads of the spool while no bundle is ready. A read runs in a thread of its own; until it has
    committed, and in between reads, a draw answers "nothing ready" at once (`TaskNotReady`; PRIME-RL's dispatcher
    tries again on its next pass), so the orchestrator's event loop never waits for live data or for the read."""
    gc_freeze: bool = True
    """When the stream opens, move every object the orchestrator holds to the collector's permanent generation
    (`gc.freeze()`). A full collection holds the interpreter for as long as it takes to scan every tracked object
    (about 0.8 s per million on 2 busy cores), on whichever thread allocated last, so a read's allocations would stall
    PRIME-RL's loop for the scan of its whole heap (torch, transformers, verifiers: half a million objects);
    frozen, the scan covers only what was made since. The cost: cyclic garbage among the frozen objects is never
    freed (they are the imports and the run's configuration)."""
    keep_reads: int = Field(1000, ge=1)
    """`journal/reads/` keeps the newest this many reads' counts and rejected lines (an audit trail; the totals stay
    in `journal/state.json`)."""

    @model_validator(mode="after")
    def _check(self) -> RealtimeSessionsConfig:
        if self.pii.scan and not self.pii.tokenizer:
            raise ValueError("pii.tokenizer is unset: the realtime-sessions source scans the decoded token streams "
                             "for secrets before they train; set it to the served model's tokenizer (`composer-prime "
                             "realtime` fills it from PRIME-RL's model.name)")  # fmt: skip
        if self.staleness.mode == "importance_weight":
            raise ValueError(
                "staleness.mode = 'importance_weight' needs the trainer's current logprobs of each stale session, "
                "which PRIME-RL's orchestrator does not have when it draws a task; use mode = 'drop' with the "
                "realtime-sessions source (every session still trains under the loss's per-token ratio and trust "
                "region against its serving logprobs)"
            )
        return self


class BundleData(vf.TaskData):
    bundle: int
    """Sequence number of the bundle in the journal, from 1."""
    group: str
    """The baseline group the sessions share ("" when the bundle is the sessions read together)."""
    sessions: list[Episode]
    """The sessions, as `join.build_episodes` made them (token streams, serving logprobs, reward, age)."""
    counts: dict[str, int] = Field(default_factory=dict)
    """What the reads since the previous bundle counted: sessions, signals and every skip reason."""
    pruned: bool = False
    """A placeholder for a bundle pruned from the journal: PRIME-RL's resume discards it; it is never run."""
    replay: int | None = None
    """On an agent run's task: the position in the bundle of the one session it replays (`sessions` then holds only
    that session, and `counts` only on the first, so an episode's wire size grows with the bundle, not its square).
    None on the bundle itself."""

    def session(self) -> Episode:
        if self.replay is None or len(self.sessions) != 1:
            raise ValueError(
                f"bundle {self.bundle}: this task is the whole bundle ({len(self.sessions)} sessions); the replay "
                "harness runs under the realtime-sessions env, which gives each agent run one session of it"
            )
        return self.sessions[0]

    def for_replay(self, position: int) -> BundleData:
        """The task data of the agent run that replays session `position`."""
        return self.model_copy(update={"sessions": [self.sessions[position]], "replay": position,
                                       "counts": self.counts if position == 0 else {}})  # fmt: skip


class BundleTask(vf.Task[BundleData]):
    @property
    def key(self) -> str:
        suffix = "" if self.data.replay is None else f"/{self.data.replay}"
        return f"realtime-bundle-{self.data.bundle:08d}{suffix}"

    @vf.reward(weight=1.0)
    async def signals(self, trace: vf.Trace) -> float:
        """The reward model's value of the replayed session's outcome signals (`reward.py`)."""
        return self.data.session().reward

    @vf.metric
    async def realtime(self, trace: vf.Trace) -> dict[str, float]:
        """The session's age and size; on a bundle's first session, the counts of the reads since the previous
        bundle (so each count is logged once, on one trace)."""
        episode = self.data.session()
        out = {
            f"{METRIC_PREFIX}/age": float(episode.age),
            f"{METRIC_PREFIX}/sampled_tokens": float(episode.sampled_tokens),
        }
        return out | {f"{METRIC_PREFIX}/{name}": float(n) for name, n in sorted(self.data.counts.items())}


class JournalState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cursor: Cursor = Cursor()
    staged: list[Episode] = Field(default_factory=list)
    """Sessions read and turned into episodes, waiting for enough company to fill a bundle."""
    handed: int = 0
    """Bundles handed out (the journal's bundles/1..handed)."""
    pruned: int = 0
    """Bundles 1..pruned are forgotten (below PRIME-RL's oldest kept checkpoint): replayed as placeholders."""
    reads: int = 0
    """Reads that found something (journal/reads/1..reads)."""
    carry: dict[str, int] = Field(default_factory=dict)
    """Counts of reads not yet reported on a bundle."""
    totals: dict[str, int] = Field(default_factory=dict)
    """Every count since the journal began."""


def cut_bundles(staged: list[Episode], size: int) -> tuple[list[tuple[str, list[Episode]]], list[Episode]]:
    """Bundles of `size` sessions, oldest first: each group with enough sessions its own, then the rest together.
    Returns the bundles (group, sessions) and what stays staged."""
    groups: dict[str, list[Episode]] = defaultdict(list)
    for e in staged:
        groups[e.group].append(e)
    bundles: list[tuple[str, list[Episode]]] = []
    rest: list[Episode] = []
    for name, members in groups.items():
        if not name:
            rest.extend(members)
            continue
        full = len(members) - len(members) % size
        bundles.extend((name, members[i : i + size]) for i in range(0, full, size))
        rest.extend(members[full:])
    order = {id(e): i for i, e in enumerate(staged)}
    rest.sort(key=lambda e: order[id(e)])
    full = len(rest) - len(rest) % size
    bundles.extend(("", rest[i : i + size]) for i in range(0, full, size))
    return bundles, rest[full:]


class Journal:
    """The source's durable state in one folder (module docstring)."""

    def __init__(self, path: Path):
        self.path = path
        self.state_path = path / "state.json"
        self.ids = path / "ids"

    def bundle_path(self, seq: int) -> Path:
        return self.path / "bundles" / f"{seq:08d}.json"

    def read_path(self, k: int) -> Path:
        return self.path / "reads" / f"{k:08d}.json"

    def forget_reads(self, state: JournalState, keep: int) -> None:
        """Delete the reads' records older than the newest `keep`."""
        for path in (self.path / "reads").glob("*.json"):
            if path.stem.isdigit() and int(path.stem) <= state.reads - keep:
                path.unlink(missing_ok=True)

    def load(self) -> JournalState:
        if not self.state_path.exists():
            return JournalState()
        return durable.load(JournalState, self.state_path)

    def handed(self, state: JournalState) -> Iterator[BundleData]:
        for seq in range(1, state.pruned + 1):  # every resume PRIME-RL can make discards these: only the count matters
            yield BundleData(idx=seq, name=f"realtime-bundle-{seq:08d}", prompt="A bundle pruned from the journal.",
                             bundle=seq, group="", sessions=[], pruned=True)  # fmt: skip
        for seq in range(state.pruned + 1, state.handed + 1):
            path = self.bundle_path(seq)
            if not path.exists():
                raise FileNotFoundError(
                    f"realtime-sessions: journal {str(self.path)!r} says {state.handed} bundles were handed out but "
                    f"{path.name} is missing; the journal must stay whole while PRIME-RL checkpoints refer to it"
                )
            yield durable.load(BundleData, path)

    def prune(self, state: JournalState, floor: int) -> JournalState:
        """Forget bundles 1..floor: state.json records the new floor first (atomically), then their files go. A crash
        in between leaves files below the floor, which `sweep` removes at the next open or prune."""
        floor = min(floor, state.handed)
        if floor <= state.pruned:
            return state
        nxt = state.model_copy(update={"pruned": floor})
        durable.save(self.state_path, nxt)
        self.sweep(nxt)
        return nxt

    def sweep(self, state: JournalState) -> None:
        for path in (self.path / "bundles").glob("*.json"):
            if path.stem.isdigit() and int(path.stem) <= state.pruned:
                path.unlink(missing_ok=True)

    def read(self, state: JournalState, config: RealtimeSessionsConfig, steps: Steps, scrub: Scrubber, now: float,
             seen: SeenIds) -> tuple[JournalState, list[int]]:  # fmt: skip
        """Read what is new in the spool, cut the bundles that are ready and commit: bundle files, then state; then
        forget what the committed state no longer needs (id-memory days past the horizon, old reads' records).
        Returns the new state and the sequence numbers of the bundles written.

        The released sessions are turned into episodes and cut into bundles `READ_SLICE` at a time (caps per slice),
        and each bundle is written as it is cut, so memory holds one slice, never the whole release."""
        step = advance(state.cursor, config.spool, now, seen)
        counts = Counter(step.counts)
        staged = []
        for e in state.staged:  # staged sessions age while they wait
            e = e.model_copy(update={"age": steps.age(e.policy_version)})
            verdict = classify(e.age, config.staleness)
            if verdict in ("drop", "future_version"):
                counts["stale_dropped" if verdict == "drop" else "future_version"] += 1
            else:
                staged.append(e)
        carry = Counter(state.carry) + counts  # counts not yet reported on a bundle: the next one cut carries them
        handed = state.handed
        for ready in step.ready_slices(READ_SLICE):
            episodes, built = build_episodes(ready, steps, config.reward, config.staleness, scrub)
            episodes, built["quarantined"] = quarantine(config.monitors, episodes)
            episodes, built["user_capped"] = cap_share(episodes, "user", config.max_user_share)
            episodes, built["group_capped"] = cap_share(episodes, "group", config.max_group_share)
            counts += built
            carry += built
            cut, staged = cut_bundles([*staged, *episodes], config.bundle_size)
            for group, sessions in cut:
                handed += 1
                data = BundleData(
                    idx=handed, name=f"realtime-bundle-{handed:08d}",
                    prompt=f"Replay of {len(sessions)} logged sessions (bundle {handed}, group {group!r}).",
                    bundle=handed, group=group, sessions=sessions, counts=dict(carry),
                )  # fmt: skip
                carry = Counter()
                durable.save(self.bundle_path(handed), data)
        nxt = state.model_copy(update={"cursor": step.cursor, "staged": staged, "handed": handed})
        if counts or step.rejected:
            nxt.reads += 1
            durable.save(self.read_path(nxt.reads), {"counts": dict(counts), "rejected": step.rejected})
        nxt.totals = dict(Counter(nxt.totals) + counts)
        nxt.carry = dict(carry)
        if nxt != state:
            durable.save(self.state_path, nxt)
        seen.sweep()
        self.read_path(nxt.reads - config.keep_reads).unlink(missing_ok=True)
        return nxt, list(range(state.handed + 1, handed + 1))


class BundleStream:
    """The taskset's tasks as PRIME-RL draws them: the journal's bundles first, then new ones as the spool gives them.

    `__next__` never waits and never reads the spool itself: PRIME-RL calls it on its orchestrator's event loop. The
    journal's bundles are replayed at once (a resume draws and discards them in one synchronous loop, so they must be
    there; loading one is one small file). After that, a read (prune, read the spool, build and journal the bundles)
    runs in a thread of its own, started by a draw at most every `poll_s` seconds, or at once when the previous
    read's bundles are used up; until it has committed, draws answer `TaskNotReady` (the stream stays usable), then
    they take its bundles in order. The thread works in small steps (a line, a session, a file) and releases the
    interpreter between them, so the loop is never held for long (docs/realtime.md, "Bounds"). An error in a read is
    raised by the next draw, and by every one after it. The first `__next__` takes the journal's lock; `close()`
    waits for a read in flight and releases it."""

    def __init__(self, taskset: RealtimeSessionsTaskset):
        self.taskset = taskset
        self.config = taskset.config
        self.journal = Journal(self.config.journal)
        self.lock: Any = None
        self.state = JournalState()
        self.replay: Iterator[BundleData] | None = None
        self.ready: deque[int] = deque()
        """Sequence numbers of bundles a read wrote and no draw has taken yet (each loaded from its file when drawn)."""
        self.scrub: Scrubber | None = None
        self.seen: SeenIds | None = None
        self.next_read = 0.0
        self.floor = Floor(self.config.checkpoints, self.config.checkpoint_env) if self.config.checkpoints else None
        self.worker: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.closed = False

    def __iter__(self) -> BundleStream:
        return self

    def _open(self) -> None:
        from filelock import FileLock, Timeout

        config = self.config
        config.journal.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(config.journal / "lock"), thread_local=False)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            self.closed = True
            raise RuntimeError(
                f"realtime-sessions: journal {str(config.journal)!r} is in use by another reader; one orchestrator "
                "reads a journal (give each PRIME-RL run its own `journal`)"
            ) from None
        self.lock = lock
        try:
            self.scrub = Scrubber(config.pii)  # loads the tokenizer (once, at open: a resume replays before any read)
            if config.gc_freeze:
                import gc

                gc.freeze()
            self.state = self.journal.load()
            if self.state.pruned:
                check_pruned(
                    self.config.journal, self.state.pruned, self.config.checkpoints, self.config.checkpoint_env
                )
                self.journal.sweep(self.state)
            self.replay = self.journal.handed(self.state)
        except BaseException:
            self.close()
            raise

    @property
    def reading(self) -> bool:
        """Whether a read is in flight."""
        return self.worker is not None and self.worker.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the read in flight (if any) has finished; whether one was in flight. For callers that may
        wait (`load()`, tests); PRIME-RL's loop never calls it."""
        worker = self.worker
        if worker is None or not worker.is_alive():
            return False
        worker.join(timeout)
        return True

    def __next__(self) -> BundleTask:
        if self.closed:
            raise StopIteration
        if self.failure is not None:
            raise self.failure
        if self.lock is None:
            self._open()
        if self.replay is not None:
            data = next(self.replay, None)
            if data is not None:
                return self._task(data)
            self.replay = None
        if self.ready:
            return self._task(durable.load(BundleData, self.journal.bundle_path(self.ready.popleft())))
        if self.reading:
            raise TaskNotReady(f"realtime-sessions: reading the spool (journal {str(self.config.journal)!r})")
        now = time.monotonic()
        if now < self.next_read:
            raise TaskNotReady(self._waiting(self.next_read - now))
        self.worker = threading.Thread(target=self._read, name="realtime-sessions-read", daemon=True)
        self.worker.start()
        raise TaskNotReady(f"realtime-sessions: reading the spool (journal {str(self.config.journal)!r})")

    def _read(self) -> None:
        """One read, in the worker thread: the only code that writes the journal while the stream is open."""
        try:
            assert self.scrub is not None  # set by _open
            if self.seen is None:
                self.seen = SeenIds(self.journal.ids, self.state.cursor.ids)
                self.seen.sweep()
                self.journal.forget_reads(self.state, self.config.keep_reads)
            if self.floor is not None:
                self.state = self.journal.prune(self.state, self.floor.floor(self.config.state_file))
            self.state, bundles = self.journal.read(self.state, self.config, self.taskset.steps(), self.scrub,
                                                    time.time(), self.seen)  # fmt: skip
            self.ready.extend(bundles)
            done = time.monotonic()
            self.next_read = done if bundles else done + self.config.poll_s
        except BaseException as err:  # raised on the event loop by the next draw
            self.failure = err

    def _task(self, data: BundleData) -> BundleTask:
        task = BundleTask(data, self.config.task)
        prompt = self.taskset.system_prompt
        return task.with_system_prompt(prompt) if prompt is not None else task

    def _waiting(self, seconds: float) -> str:
        return (f"realtime-sessions: no bundle is ready (journal {str(self.config.journal)!r}: {self.state.handed} "
                f"handed out, {len(self.state.staged)} sessions staged); the spool is read again in {seconds:.1f} s")  # fmt: skip

    def close(self) -> None:
        self.closed = True
        if self.worker is not None and self.worker is not threading.current_thread():
            self.worker.join()  # the lock covers the journal until the read in flight has committed
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __del__(self) -> None:
        self.close()


class RealtimeSessionsTaskset(vf.Taskset[BundleTask, RealtimeSessionsConfig]):
    INFINITE = True

    def steps(self) -> Steps:
        """Where the trainer is, for aging sessions (the config's `state_file` and `checkpoints`)."""
        from composer_prime.realtime.cluster import newest_step

        config = self.config
        if config.state_file is None or not config.state_file.exists():
            version = config.served_version
            return Steps(now=version, versions={v: v for v in range(version + 1)})
        state = json.loads(config.state_file.read_text())
        versions = {int(v): int(s) for v, s in state.get("version_steps", {"0": 0}).items()}
        newest = newest_step(config.checkpoints.parent) if config.checkpoints is not None else None
        return Steps(now=max(int(state.get("step", 0)), newest or 0), versions=versions)

    def __iter__(self) -> Iterator[BundleTask]:
        """What PRIME-RL's orchestrator iterates (`orchestrator/envs.py`): a stream that raises `TaskNotReady` instead
        of waiting (`seam/train_source.py`). A `head(n)` view iterates `load()`, which waits."""
        if self.transform is not None:
            return super().__iter__()
        return BundleStream(self)

    def load(self) -> Iterator[BundleTask]:
        """The same tasks for a caller that can wait (verifiers' own views): sleeps `poll_s` while none is ready."""
        stream = BundleStream(self)
        try:
            while True:
                try:
                    yield next(stream)
                except TaskNotReady:
                    if not stream.wait():
                        time.sleep(max(0.0, stream.next_read - time.monotonic()))
        finally:
            stream.close()
