"""`[orchestrator.train.source.env.taskset]` of a realtime train source: the settings of the `realtime-sessions`
taskset (`source.py`) and of the journal it hands bundles out through (`journal.py`)."""

from __future__ import annotations

from pathlib import Path

import verifiers.v1 as vf
from pydantic import Field, model_validator

from composer_prime.realtime.ingest.spool import SpoolConfig
from composer_prime.realtime.ingest.staleness import StalenessConfig
from composer_prime.realtime.monitors.alerts import MonitorsConfig
from composer_prime.realtime.monitors.pii import PIIConfig
from composer_prime.realtime.monitors.reward import RewardModelConfig


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
    """At most this share of each PRIME-RL batch's live sessions from one user (`user_capped`, dropped where the batch
    is cut: `composer_prime/seam/batch_caps.py`); 1.0: no cap."""
    max_group_share: float = Field(1.0, gt=0, le=1)
    """At most this share of each PRIME-RL batch's live sessions from one `group` (`group_capped`, as above); 1.0: no
    cap."""
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
    manage_gc: bool = True
    """Keep the garbage collector's scans off PRIME-RL's loop. A collection holds the interpreter for a scan of every
    tracked object of the generations it covers (a full one: about 0.8 s per million objects on 2 busy cores), on
    whichever thread allocated last, so a read's allocations would stall the loop for the scan of the orchestrator's
    heap (torch, transformers, verifiers: half a million objects) and of everything the read holds. On, opening the
    stream moves the heap to the collector's permanent generation (`gc.freeze()`; again after the first read loads the
    tokenizer), and automatic collection is paused while a read runs (`gc.disable()`, restored when the last read in
    flight ends): what a read holds is freed by reference counting when it ends, never scanned. The cost: cyclic
    garbage among the frozen objects is never freed (imports, the run's configuration), and the orchestrator's own
    cyclic garbage waits for the read in flight to end."""
    read_lines: int = Field(20_000, ge=100)
    """Spool lines one read takes at most (and `spool.max_lines_per_cycle`, when lower). A backlog is read in
    slices this size, each committed with its bundles before the next starts, at once: what a read holds and writes
    stays this size whatever the backlog (the cursor keeps a signal window of sessions, `spool.py`)."""
    keep_reads: int = Field(1000, ge=1)
    """`journal/reads/` keeps the newest this many reads' counts and rejected lines (an audit trail; the totals stay
    in `journal/state.json`)."""

    @model_validator(mode="after")
    def _check(self) -> RealtimeSessionsConfig:
        if self.pii.scan and not self.pii.tokenizer:
            raise ValueError(
                "pii.tokenizer is unset: the realtime-sessions source scans the decoded token streams "
                "for secrets before they train; set it to the served model's tokenizer (`composer-prime "
                "realtime` fills it from PRIME-RL's model.name)"
            )
        if self.staleness.mode == "importance_weight":
            raise ValueError(
                "staleness.mode = 'importance_weight' needs the trainer's current logprobs of each stale session, "
                "which PRIME-RL's orchestrator does not have when it draws a task; use mode = 'drop' with the "
                "realtime-sessions source (every session still trains under the loss's per-token ratio and trust "
                "region against its serving logprobs)"
            )
        return self
