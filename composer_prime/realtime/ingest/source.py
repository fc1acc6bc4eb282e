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

The hand-out journal (`journal.py`) makes the source exactly-once against PRIME-RL's own checkpoints: a read's
bundles are written, then its state, then yielded; on resume the journal's bundles are replayed in order before
anything new, so PRIME-RL's discard count lands where its checkpoint left off.
"""

from __future__ import annotations

import gc
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from composer_prime.realtime import durable
from composer_prime.realtime.ingest.journal import BundleData, Journal, JournalState
from composer_prime.realtime.ingest.pruning import Floor, check_pruned, newest_step
from composer_prime.realtime.ingest.readiness import TaskNotReady
from composer_prime.realtime.ingest.seen import SeenIds
from composer_prime.realtime.ingest.source_config import RealtimeSessionsConfig
from composer_prime.realtime.ingest.staleness import Steps
from composer_prime.realtime.monitors.pii import Scrubber

logger = logging.getLogger(__name__)

_paused = 0
_paused_lock = threading.Lock()
_was_enabled = True


def pause_collector() -> None:
    """Pause automatic garbage collection until the matching `resume_collector` (nested across streams)."""
    global _paused, _was_enabled
    with _paused_lock:
        if _paused == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused += 1


def resume_collector() -> None:
    global _paused
    with _paused_lock:
        _paused -= 1
        if _paused == 0 and _was_enabled:
            gc.enable()


TASKSET_ID = "realtime-sessions"
PARSE_AHEAD = 128
"""Bundles the worker parses ahead of the draws (two passes of PRIME-RL's dispatcher at 64 in flight)..."""
PARSE_AHEAD_BYTES = 64 << 20
"""... and at most this much of their files (long sessions: 8 of 20,000 tokens make a 1 MB bundle file, and a
parsed token costs more memory than its digits)."""
METRIC_PREFIX = "composer/realtime"


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


def _serve(jobs: queue.SimpleQueue[Any], idle: threading.Event) -> None:
    """A stream's worker thread: run each job handed over until None. It holds a job (and through it the stream)
    only while running it, so a stream nobody holds is still collected, and closed."""
    while (work := jobs.get()) is not None:
        try:
            work()
        finally:
            del work
            idle.set()


class BundleStream:
    """The taskset's tasks as PRIME-RL draws them: the journal's bundles first, then new ones as the spool gives them.

    `__next__` never waits and never reads the spool itself: PRIME-RL calls it on its orchestrator's event loop. The
    journal's bundles are replayed at once (a resume draws and discards them in one synchronous loop, so they must be
    there; loading one is one small file). After that, a read (prune, read the spool, build and journal the bundles)
    runs in one worker thread of the stream's own, handed to it (never waited for) by a draw at most every
    `poll_s` seconds, or at once when the previous
    read's bundles are used up; until it has committed, draws answer `TaskNotReady` (the stream stays usable), then
    they take its bundles in order. The same thread parses the written bundles into tasks, up to `PARSE_AHEAD` ahead
    of the draws (and again when half of those are drawn), so a draw hands over an object and never parses a file on
    the loop. The interpreter lock passes between threads only between bytecodes, so the
    thread makes no long C call (the spool read 1 MiB at a time, the id memory in small sets) and, with `manage_gc`,
    runs with automatic collection paused so no scan of the heap lands on it (docs/realtime.md, "Bounds"). The
    first read loads the tokenizer. An error in a read is
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
        """Sequence numbers of bundles a read wrote and the worker has not parsed yet."""
        self.parsed: deque[tuple[BundleTask, int]] = deque()
        """Tasks parsed from their bundle files by the worker, in order, with their files' sizes: what draws hand
        over."""
        self.parsed_bytes = 0
        """The size of the bundle files `parsed` holds (what bounds it, with `PARSE_AHEAD`)."""
        self.scrub: Scrubber | None = None
        self.seen: SeenIds | None = None
        self.next_read = 0.0
        self.floor = Floor(self.config.checkpoints, self.config.checkpoint_env) if self.config.checkpoints else None
        self.worker: threading.Thread | None = None
        """The one thread that reads and parses, started by the first read; a draw hands it work through `jobs`
        and never waits for it (starting a thread per read made the draw wait for the new thread to be scheduled:
        200 ms on a loaded machine)."""
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.idle = threading.Event()
        self.idle.set()
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
            if config.manage_gc:  # before the replay, which a resume draws on the loop
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
        """Whether a read (or a parse) is in flight."""
        return not self.idle.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the read in flight (if any) has finished; whether one was in flight. For callers that may
        wait (`load()`, tests); PRIME-RL's loop never calls it."""
        if self.idle.is_set():
            return False
        self.idle.wait(timeout)
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
        if self.parsed:
            task, size = self.parsed.popleft()
            self.parsed_bytes -= size
            if len(self.parsed) < PARSE_AHEAD // 2 and self.ready and not self.reading:
                self._start(self._parse)  # parse the next ones while these are drawn
            return task
        if self.reading:
            raise TaskNotReady(f"realtime-sessions: reading the spool (journal {str(self.config.journal)!r})")
        if self.ready:
            self._start(self._parse)
            raise TaskNotReady(f"realtime-sessions: parsing bundles (journal {str(self.config.journal)!r})")
        now = time.monotonic()
        if now < self.next_read:
            raise TaskNotReady(self._waiting(self.next_read - now))
        self._start(self._read)
        raise TaskNotReady(f"realtime-sessions: reading the spool (journal {str(self.config.journal)!r})")

    def _start(self, work: Any) -> None:
        self.idle.clear()
        if self.worker is None:
            self.worker = threading.Thread(
                target=_serve, args=(self.jobs, self.idle), name="realtime-sessions-read", daemon=True
            )
            self.worker.start()
        self.jobs.put(work)

    def _parse(self) -> None:
        """Parse up to `PARSE_AHEAD` written bundles into tasks, in the worker thread: a draw on the loop only hands
        over an object."""
        if self.config.manage_gc:
            pause_collector()
        try:
            while self.ready and len(self.parsed) < PARSE_AHEAD and self.parsed_bytes < PARSE_AHEAD_BYTES:
                path = self.journal.bundle_path(self.ready[0])
                size = path.stat().st_size if path.exists() else 0
                self.parsed.append((self._task(durable.load(BundleData, path)), size))
                self.parsed_bytes += size
                self.ready.popleft()
        except BaseException as err:  # raised on the event loop by the next draw
            self.failure = err
        finally:
            if self.config.manage_gc:
                resume_collector()

    def _read(self) -> None:
        """One read, in the worker thread: the only code that writes the journal while the stream is open; then
        the first of its bundles parsed."""
        if self.config.manage_gc:
            pause_collector()
        try:
            if self.scrub is None:  # the first read: the tokenizer, then the orchestrator's heap frozen with it
                self.scrub = Scrubber(self.config.pii)
                if self.config.manage_gc:
                    gc.freeze()
            if self.seen is None:
                self.seen = SeenIds(self.journal.ids, self.state.cursor.ids)
                self.seen.sweep()
                self.journal.forget_reads(self.state, self.config.keep_reads)
            if self.floor is not None:
                self.state = self.journal.prune(self.state, self.floor.floor(self.config.state_file))
            self.state, bundles = self.journal.read(
                self.state, self.config, self.taskset.steps(), self.scrub, time.time(), self.seen
            )
            self.ready.extend(bundles)
            done = time.monotonic()
            self.next_read = done if bundles else done + self.config.poll_s
        except BaseException as err:  # raised on the event loop by the next draw
            self.failure = err
        finally:
            if self.config.manage_gc:
                resume_collector()
        if self.failure is None:
            self._parse()

    def _task(self, data: BundleData) -> BundleTask:
        task = BundleTask(data, self.config.task)
        prompt = self.taskset.system_prompt
        return task.with_system_prompt(prompt) if prompt is not None else task

    def _waiting(self, seconds: float) -> str:
        return (
            f"realtime-sessions: no bundle is ready (journal {str(self.config.journal)!r}: {self.state.handed} "
            f"handed out, {len(self.state.staged)} sessions staged); the spool is read again in {seconds:.1f} s"
        )

    def close(self) -> None:
        self.closed = True
        if self.worker is not None:
            self.jobs.put(None)
            if self.worker is not threading.current_thread():
                self.worker.join()  # the lock covers the journal until the read in flight has committed
            self.worker = None
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __del__(self) -> None:
        try:
            self.close()
        except (AttributeError, TypeError):  # interpreter exit: module globals (`threading`) are None by now, and
            pass  # the exiting process drops the journal's lock with its file descriptors


class RealtimeSessionsTaskset(vf.Taskset[BundleTask, RealtimeSessionsConfig]):
    INFINITE = True

    def steps(self) -> Steps:
        """Where the trainer is, for aging sessions (the config's `state_file` and `checkpoints`)."""
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
