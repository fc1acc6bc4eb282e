"""Caps per PRIME-RL batch on live sessions: one user or one repository never holds more than its share of a trained
batch (docs/realtime.md, "Safety of the signal").

The `realtime-sessions` taskset cannot see PRIME-RL's batches: it hands out bundles, and PRIME-RL's `TrainSink` cuts a
batch from the traces of whichever groups finished first (`process_batch`: the first `batch_size` traces in arrival
order, or the prefix that reaches `token_batch_size`). So the cap is applied where the batch is cut.
`patch_train_sink` (applied by the import hook when `prime_rl.orchestrator.train_sink` loads) wraps
`TrainSink._maybe_batch`: after PRIME-RL's staleness sweep, once a batch is ready, the traces it would take are capped
as the single-process loop caps its batch (`join.cap_share`: each user, and each `group`, at most its share of what
is kept, at least one session each; a session without a user or group is no one's and never capped), and the batch is
cut from what they keep. The traces after it wait for the next batch, as they would have; the batch is shorter by
the drops, so a run with fewer users than `1 / max_user_share` still trains, on smaller batches, and nothing waits
without bound.

- The caps are the orchestrator's own config of the trace's source (`[orchestrator.train.source.env.taskset]`
  `max_user_share`, `max_group_share`), so a change applies to every batch cut after the restart; a live session is
  a trace with `info["realtime"]`, where the replay harness writes the session's own `user` and `group`.
- Shares count sessions (traces), in both batch modes, not tokens.
- A trace that `filter_zero_advantages` (PRIME-RL's default) will drop after the cut holds no share: only the sessions
  that would train are counted and capped.
- A dropped trace leaves the batch as a staleness drop does (its samples and tokens unqueued, its episode's trace
  recorded as not sampled) and is counted on the sink (`realtime_capped`), in the orchestrator's log, and in
  PRIME-RL's step metrics (`composer/realtime/user_capped`, `group_capped`: the drops since the previous batch, on
  every live session of the batch). Credit was assigned over the bundle first, so a kept session's baseline still
  includes the sessions dropped beside it.
"""

from __future__ import annotations

import copy
from collections import Counter
from types import ModuleType, SimpleNamespace
from typing import Any

from composer_prime.seam.errors import seam_moved

KEYS = (("user", "max_user_share", "user_capped"), ("group", "max_group_share", "group_capped"))
"""(the session's field in `trace.info["realtime"]`, the taskset's setting, the count's name) for each cap."""


def _shares(sink: Any, module: ModuleType, trace_id: str) -> dict[str, float] | None:
    """The caps under 1 of the trace's source, read from the orchestrator's own config of it; None for a trace that
    is not a live session (no `info["realtime"]`, or its source's taskset has no caps)."""
    if not isinstance(sink._trace(trace_id).info.get("realtime"), dict):
        return None
    taskset = getattr(
        sink.train_envs.get(module.episode_env_name(sink.episode_by_trace[trace_id])).config.env, "taskset", None
    )
    shares = {field: getattr(taskset, setting, 1.0) for field, setting, _ in KEYS}
    return {field: share for field, share in shares.items() if share < 1.0} or None


def _ships(sink: Any, module: ModuleType, trace_id: str) -> bool:
    """Whether the trace would reach the trainer: PRIME-RL's `filter_zero_advantages` (on by default) drops a trace
    whose every sample has no advantage after the cut, so such a trace holds no share of what trains."""
    if not sink.config.train.filter_zero_advantages:
        return True
    # PRIME-RL's own rule, on shallow copies: it assigns `rl_weights`, and a pruned sample must still be pruned at the cut.
    return any(module._prune_zero_advantages(copy.copy(sample)) for sample in sink.pending_batch[trace_id])


def window(sink: Any, module: ModuleType) -> list[str] | None:
    """The traces PRIME-RL's `process_batch` takes next (the first `batch_size`, or the prefix that reaches
    `token_batch_size`), or None while no batch is ready."""
    ids = list(sink.pending_batch)
    if sink.batch_size is not None:
        return ids[: sink.batch_size] if len(ids) >= sink.batch_size else None
    running = 0
    for n, trace_id in enumerate(ids, 1):
        running += module.payload_tokens(sink.pending_batch[trace_id], sink._trace(trace_id))
        if running >= sink.token_batch_size:
            return ids[:n]
    return None


def over_cap(sink: Any, module: ModuleType, ids: list[str]) -> tuple[list[str], Counter]:
    """The live sessions of `ids` to drop and their counts by name: `join.cap_shares` over the sessions that would
    train, with the smallest share their sources set for each field."""
    from composer_prime.realtime.ingest.join import cap_shares

    live, limits = [], {field: 1.0 for field, _, _ in KEYS}
    for trace_id in ids:
        shares = _shares(sink, module, trace_id)
        if shares is not None and _ships(sink, module, trace_id):
            info = sink._trace(trace_id).info["realtime"]
            live.append(SimpleNamespace(id=trace_id, **{field: str(info.get(field) or "") for field, _, _ in KEYS}))
            limits = {field: min(limits[field], shares.get(field, 1.0)) for field in limits}
    kept, counts = cap_shares(live, limits["user"], limits["group"])
    kept_ids = {row.id for row in kept}
    return [row.id for row in live if row.id not in kept_ids], +counts


def _drop(sink: Any, module: ModuleType, trace_id: str) -> None:
    """Unqueue one trace as PRIME-RL's staleness sweep does, and record it as not sampled."""
    trace = sink._trace(trace_id)
    samples = sink.pending_batch.pop(trace_id)
    if sink.token_batch_size is not None:
        sink.pending_tokens -= module.payload_tokens(samples, trace)
    del sink.episode_by_trace[trace_id]
    sink.pending_episodes.sampled_trace_ids.discard(trace_id)


def cut_capped(sink: Any, module: ModuleType, original: Any) -> Any:
    """PRIME-RL's `_maybe_batch`, with the live sessions over their caps dropped from the batch it cuts."""
    sink._drop_stale()  # PRIME-RL's sweep first (it runs once per step), so the caps judge the survivors
    ids = window(sink, module)
    drop, dropped = over_cap(sink, module, ids) if ids is not None else ([], Counter())
    if not drop:
        batch = original(sink)
    else:
        for trace_id in drop:
            _drop(sink, module, trace_id)
        sink.realtime_capped = getattr(sink, "realtime_capped", Counter()) + dropped
        sink.realtime_capped_since_cut = getattr(sink, "realtime_capped_since_cut", Counter()) + dropped
        module.get_logger().warning(
            "composer-prime realtime caps: dropped "
            + ", ".join(f"{n} {name}" for name, n in sorted(dropped.items()))
            + f" live-session traces of the {len(ids)} the next batch takes (max_user_share / max_group_share of the "
            f"realtime-sessions taskset); {sum(sink.realtime_capped.values())} in this run"
        )
        # Cut the batch from what the window kept: the traces after it wait for the next batch, as they would have.
        kept = set(ids) - set(drop)
        rest = {t: sink.pending_batch.pop(t) for t in list(sink.pending_batch) if t not in kept}
        rest_tokens = 0
        if sink.token_batch_size is not None:
            rest_tokens = sum(module.payload_tokens(samples, sink._trace(t)) for t, samples in rest.items())
            sink.pending_tokens -= rest_tokens
        try:
            batch = sink.process_batch()
        finally:
            sink.pending_batch.update(rest)
            sink.pending_tokens += rest_tokens
    if batch is not None:
        record_on_batch(sink, batch)
    return batch


def record_on_batch(sink: Any, batch: Any) -> None:
    """Put the drops since the previous cut on every live session of the batch cut now, as the trace metric
    `composer/realtime/<user_capped|group_capped>`: PRIME-RL's step metrics average a trace metric over the traces
    that have it, so its `.../metrics/composer/realtime/user_capped/mean` is the count for this batch."""
    since = getattr(sink, "realtime_capped_since_cut", Counter())
    for episode in batch.cohort.episodes:
        for trace in episode.traces:
            if isinstance(trace.info.get("realtime"), dict):
                trace.metrics |= {f"composer/realtime/{name}": float(since[name]) for _, _, name in KEYS}
    sink.realtime_capped_since_cut = Counter()


def patch_train_sink(module: ModuleType) -> None:
    """Make `module.TrainSink._maybe_batch` (PRIME-RL's `prime_rl.orchestrator.train_sink`) drop live sessions over
    their caps from the batch it cuts. Idempotent."""
    sink = getattr(module, "TrainSink", None)
    methods = ("_maybe_batch", "_drop_stale", "process_batch", "_trace")
    if sink is None or not all(callable(getattr(sink, m, None)) for m in methods):
        raise seam_moved("prime_rl.orchestrator.train_sink has no TrainSink with " + ", ".join(methods))
    for name in ("payload_tokens", "get_logger", "episode_env_name", "_prune_zero_advantages"):
        if not callable(getattr(module, name, None)):
            raise seam_moved(f"prime_rl.orchestrator.train_sink has no {name}")
    original = sink._maybe_batch
    if getattr(original, "caps_live_sessions", False):
        return

    def _maybe_batch(self: Any) -> Any:
        return cut_capped(self, module, original)

    _maybe_batch.caps_live_sessions = True  # type: ignore[attr-defined]
    _maybe_batch.__doc__ = (
        "PRIME-RL's batch cut, less the live sessions over their caps (composer-prime, seam/batch_caps.py)."
    )
    sink._maybe_batch = _maybe_batch
