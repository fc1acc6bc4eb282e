"""The hand-out journal of the `realtime-sessions` source (`source.py`): its durable state in one folder, which makes
the source exactly-once against PRIME-RL's own checkpoints (docs/realtime.md, "The journal, and exactly-once").

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

from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime import durable
from composer_prime.realtime.ingest.join import Episode, build_episodes
from composer_prime.realtime.ingest.seen import SeenIds
from composer_prime.realtime.ingest.source_config import RealtimeSessionsConfig
from composer_prime.realtime.ingest.spool import Cursor, advance
from composer_prime.realtime.ingest.staleness import Steps, classify
from composer_prime.realtime.monitors.alerts import quarantine
from composer_prime.realtime.monitors.pii import Scrubber

READ_SLICE = 256
"""Released sessions turned into episodes and bundles at a time (`Journal.read`)."""


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
        return self.model_copy(
            update={
                "sessions": [self.sessions[position]],
                "replay": position,
                "counts": self.counts if position == 0 else {},
            }
        )


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
            yield BundleData(
                idx=seq,
                name=f"realtime-bundle-{seq:08d}",
                prompt="A bundle pruned from the journal.",
                bundle=seq,
                group="",
                sessions=[],
                pruned=True,
            )
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

    def read(
        self,
        state: JournalState,
        config: RealtimeSessionsConfig,
        steps: Steps,
        scrub: Scrubber,
        now: float,
        seen: SeenIds,
    ) -> tuple[JournalState, list[int]]:
        """Read what is new in the spool, cut the bundles that are ready and commit: bundle files, then state; then
        forget what the committed state no longer needs (id-memory days past the horizon, old reads' records).
        Returns the new state and the sequence numbers of the bundles written.

        The released sessions are turned into episodes and cut into bundles `READ_SLICE` at a time,
        and each bundle is written as it is cut, so memory holds one slice, never the whole release."""
        spool = config.spool.model_copy(
            update={"max_lines_per_cycle": min(config.spool.max_lines_per_cycle, config.read_lines)}
        )
        step = advance(state.cursor, spool, now, seen)
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
            episodes, built = build_episodes(
                ready, steps, config.reward, config.staleness, scrub, config.monitors.edits_disable_tests.dynamic
            )
            episodes, built["quarantined"] = quarantine(config.monitors, episodes)
            counts += built
            carry += built
            cut, staged = cut_bundles([*staged, *episodes], config.bundle_size)
            for group, sessions in cut:
                handed += 1
                data = BundleData(
                    idx=handed,
                    name=f"realtime-bundle-{handed:08d}",
                    prompt=f"Replay of {len(sessions)} logged sessions (bundle {handed}, group {group!r}).",
                    bundle=handed,
                    group=group,
                    sessions=sessions,
                    counts=dict(carry),
                )
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
