"""Caps per PRIME-RL batch on live sessions: one user or one repository never fills a trained batch (docs/realtime.md,
"Safety of the signal").

The `realtime-sessions` taskset cannot see PRIME-RL's batches: it hands out bundles, and PRIME-RL's `TrainSink` cuts a
batch from the traces of whichever groups finished first (`process_batch`: the first `batch_size` traces in arrival
order, or the prefix that reaches `token_batch_size`). So the cap is applied where the batch is cut. The replay
harness writes each session's `user`, `group` and its source's caps (`max_user_share`, `max_group_share`) into
`trace.info["realtime"]`; `patch_train_sink` (applied by the import hook when `prime_rl.orchestrator.train_sink`
loads) runs `cap_pending` in `TrainSink._maybe_batch`, after PRIME-RL's staleness sweep and before its "is a batch
ready" test:

- **batch_size**: the pending traces are walked in the order the batch takes them; a live session whose user (or
  group) already has its quota among the traces accepted so far, `max(1, int(share * batch_size))`, is dropped, until
  `batch_size` traces are accepted. The batch PRIME-RL then cuts is those traces: each user and each group holds at
  most its share of it. Traces past the first `batch_size` accepted are left for later batches, and a batch is never
  cut short: dropping makes room that the next group to finish fills.
- **token_batch_size**: once the pending traces reach the token target, the prefix the batch would take is capped as
  the single-process loop caps its batch (`join.cap_share`: each value at most its share of what is kept), and the
  walk repeats until that prefix holds.

A dropped trace leaves the batch as a staleness drop does (its samples and tokens unqueued, its episode's trace
recorded as not sampled) and is counted on the sink (`realtime_capped`, by `user_capped` / `group_capped`), in the
orchestrator's log, and in PRIME-RL's step metrics (`composer/realtime/user_capped`, `group_capped`: the drops since
the previous batch, on every live session of the batch cut next). Traces of other sources (no `info["realtime"]`) are neither capped nor counted. The caps
drop, as the single-process loop's do: deferring a dominant user's sessions would queue them without bound, since
PRIME-RL's staleness never ages a replay. Credit was already assigned over the bundle, so a kept session's baseline
still includes the sessions dropped beside it.
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType, SimpleNamespace
from typing import Any

from composer_prime.seam.errors import seam_moved

KEYS = (("user", "user_capped"), ("group", "group_capped"))
"""(the session's field, its count) for each cap; the share is `trace.info["realtime"]["caps"][field]`."""


def _realtime(sink: Any, trace_id: str) -> dict[str, Any] | None:
    info = sink._trace(trace_id).info.get("realtime")
    return info if isinstance(info, dict) and info.get("caps") else None


def _drop(sink: Any, module: ModuleType, trace_id: str) -> None:
    """Unqueue one trace as PRIME-RL's staleness sweep does, and record it as not sampled."""
    trace = sink._trace(trace_id)
    samples = sink.pending_batch.pop(trace_id)
    if sink.token_batch_size is not None:
        sink.pending_tokens -= module.payload_tokens(samples, trace)
    del sink.episode_by_trace[trace_id]
    sink.pending_episodes.sampled_trace_ids.discard(trace_id)


def _quota_walk(sink: Any) -> dict[str, str]:
    """batch_size: the traces to drop (trace id -> its count's name) so that the first `batch_size` accepted hold
    each user and group to its quota."""
    accepted = 0
    held: dict[str, Counter] = {field: Counter() for field, _ in KEYS}
    drop: dict[str, str] = {}
    for trace_id in list(sink.pending_batch):
        if accepted >= sink.batch_size:
            break
        info = _realtime(sink, trace_id)
        if info is not None:
            over = next((name for field, name in KEYS if field in info["caps"] and info.get(field)
                         and held[field][info[field]] >= max(1, int(info["caps"][field] * sink.batch_size))),
                        None)  # fmt: skip
            if over is not None:
                drop[trace_id] = over
                continue
            for field, _ in KEYS:
                held[field][info.get(field)] += 1
        accepted += 1
    return drop


def _token_window(sink: Any, module: ModuleType) -> dict[str, str]:
    """token_batch_size: the traces to drop from the prefix the next batch takes, once it reaches the token target."""
    from composer_prime.realtime.join import cap_share

    window, running = [], 0
    for trace_id, samples in sink.pending_batch.items():
        window.append(trace_id)
        running += module.payload_tokens(samples, sink._trace(trace_id))
        if running >= sink.token_batch_size:
            break
    else:
        return {}  # no batch yet: a partial window's shares say nothing about the batch
    live = []
    for trace_id in window:
        info = _realtime(sink, trace_id)
        if info is not None:
            live.append((trace_id, info))
    drop: dict[str, str] = {}
    for field, name in KEYS:
        shares = [info["caps"][field] for _, info in live if field in info["caps"]]
        if not shares:
            continue
        rows = [SimpleNamespace(id=t, value=info.get(field) or "") for t, info in live if t not in drop]
        kept, _ = cap_share(rows, "value", min(shares))
        kept_ids = {row.id for row in kept}
        drop |= {row.id: name for row in rows if row.id not in kept_ids}
    return drop


def cap_pending(sink: Any, module: ModuleType) -> Counter:
    """Drop the live sessions over their cap from the batch `sink` cuts next; returns what was dropped, by count."""
    dropped: Counter = Counter()
    while True:
        drop = _quota_walk(sink) if sink.batch_size is not None else _token_window(sink, module)
        if not drop:
            break
        for trace_id, name in drop.items():
            _drop(sink, module, trace_id)
            dropped[name] += 1
        if sink.batch_size is not None:
            break  # the walk's decisions are final: accepted traces stay accepted, the dropped are gone
    if dropped:
        sink.realtime_capped = getattr(sink, "realtime_capped", Counter()) + dropped
        sink.realtime_capped_since_cut = getattr(sink, "realtime_capped_since_cut", Counter()) + dropped
        module.get_logger().warning(
            "composer-prime realtime caps: dropped "
            + ", ".join(f"{n} {name}" for name, n in sorted(dropped.items()))
            + " live-session traces from the next batch (max_user_share / max_group_share of the realtime-sessions "
            f"taskset); {sum(sink.realtime_capped.values())} in this run"
        )
    return dropped


def record_on_batch(sink: Any, batch: Any) -> None:
    """Put the drops since the previous cut on every live session of the batch cut now, as the trace metric
    `composer/realtime/<user_capped|group_capped>`: PRIME-RL's step metrics average a trace metric over the traces
    that have it, so its `.../metrics/composer/realtime/user_capped/mean` is the count for this batch."""
    since = getattr(sink, "realtime_capped_since_cut", Counter())
    for episode in batch.cohort.episodes:
        for trace in episode.traces:
            if isinstance(trace.info.get("realtime"), dict):
                trace.metrics |= {f"composer/realtime/{name}": float(since[name]) for _, name in KEYS}
    sink.realtime_capped_since_cut = Counter()


def patch_train_sink(module: ModuleType) -> None:
    """Make `module.TrainSink._maybe_batch` (PRIME-RL's `prime_rl.orchestrator.train_sink`) cap live sessions per
    batch before it tests whether a batch is ready. Idempotent."""
    sink = getattr(module, "TrainSink", None)
    if (
        sink is None
        or not callable(getattr(sink, "_maybe_batch", None))
        or not callable(getattr(sink, "_drop_stale", None))
    ):
        raise seam_moved("prime_rl.orchestrator.train_sink has no TrainSink._maybe_batch or TrainSink._drop_stale")
    for name in ("payload_tokens", "get_logger"):
        if not callable(getattr(module, name, None)):
            raise seam_moved(f"prime_rl.orchestrator.train_sink has no {name}")
    original = sink._maybe_batch
    if getattr(original, "caps_live_sessions", False):
        return

    def _maybe_batch(self: Any) -> Any:
        self._drop_stale()  # PRIME-RL's sweep first (it runs once per step), so the caps judge the survivors
        cap_pending(self, module)
        batch = original(self)
        if batch is not None:
            record_on_batch(self, batch)
        return batch

    _maybe_batch.caps_live_sessions = True  # type: ignore[attr-defined]
    _maybe_batch.__doc__ = (
        "PRIME-RL's batch cut, after live sessions over their cap are dropped (composer-prime, seam/batch_caps.py)."
    )
    sink._maybe_batch = _maybe_batch
