"""What one rollout of the agent did, kept on the trace.

The loop fills an `AgentStats`; the harness stores it as JSON in `trace.info["composer_agent"]` and records the flat
metrics derived from it in `trace.metrics` (`metrics_from_info`, also run by the harness's `@vf.metric`, so a replayed
trace gets the same metrics from its saved info).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from composer_agent.tools import ERROR_KINDS

INFO_KEY = "composer_agent"
PREFIX = "composer/agent"


@dataclass
class CompactionRecord:
    context_before: int
    """Context tokens when the threshold was crossed (last usage plus the estimated tool output since)."""
    context_after: int | None
    """Prompt tokens of the first request on the fresh context (usage when reported, else an estimate)."""
    summary_tokens: int
    """Completion tokens of the accepted summary."""
    attempts: int
    """Summary calls made; more than one when empty summaries were resampled."""
    turn: int
    """Agent turns completed when the compaction happened."""


@dataclass
class AgentStats:
    turns: int = 0
    tool_calls: int = 0
    tool_errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_KINDS, 0))
    compactions: list[CompactionRecord] = field(default_factory=list)
    failed_summaries: int = 0
    """Summary calls that came back empty."""
    compaction_cap_reached: bool = False
    window: int | None = None
    """The model's context window, when discovered."""
    threshold: int | None = None
    """The compaction threshold in force (None: compaction off for this rollout)."""
    model_seconds: float = 0.0
    """Wall time spent waiting on model calls (agent turns and summaries), as seen from the loop."""
    client_seconds: float = 0.0
    """Of model_seconds, the time the loop's own client spent building request bodies and parsing responses."""
    tool_seconds: float = 0.0
    """Wall time spent running tool calls in the runtime."""
    loop_seconds: float = 0.0
    """Wall time of the whole loop, from the first call to the finish."""
    reaped_processes: int = 0
    """Processes of the box still running when the rollout ended, killed by the reaper."""
    finish_reason: str | None = None
    """finish (the finish tool), text_reply, max_turns, stopped: <why>, context_overflow, compaction_failed."""

    def error(self, kind: str) -> None:
        self.tool_errors[kind] = self.tool_errors.get(kind, 0) + 1

    def to_info(self) -> dict[str, Any]:
        return asdict(self)


def metrics_from_info(info: dict[str, Any]) -> dict[str, float]:
    """Flat `composer/agent/...` metrics from the stats saved in `trace.info["composer_agent"]`."""
    errors: dict[str, int] = info.get("tool_errors") or {}
    compactions: list[dict[str, Any]] = info.get("compactions") or []
    metrics: dict[str, float] = {
        f"{PREFIX}/turns": float(info.get("turns", 0)),
        f"{PREFIX}/tool_calls": float(info.get("tool_calls", 0)),
        f"{PREFIX}/tool_errors": float(sum(errors.values())),
        f"{PREFIX}/compactions": float(len(compactions)),
        f"{PREFIX}/summary_tokens": float(sum(c.get("summary_tokens", 0) for c in compactions)),
        f"{PREFIX}/failed_summaries": float(info.get("failed_summaries", 0)),
        f"{PREFIX}/finished": float(info.get("finish_reason") == "finish"),
    }
    for kind, count in errors.items():
        metrics[f"{PREFIX}/tool_errors/{kind}"] = float(count)
    for i, c in enumerate(compactions, start=1):
        metrics[f"{PREFIX}/compaction_{i}/context_before"] = float(c["context_before"])
        if c.get("context_after") is not None:
            metrics[f"{PREFIX}/compaction_{i}/context_after"] = float(c["context_after"])
        metrics[f"{PREFIX}/compaction_{i}/summary_tokens"] = float(c["summary_tokens"])
    return metrics
