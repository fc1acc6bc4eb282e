"""The agent loop: sample a turn, run its tool calls, compact when the context is long, repeat until done.

A turn is one model call with the tools offered. Its tool calls run in order and each answers with a tool message;
the loop ends when the model calls `finish`, replies with text and no tool call, reaches `max_turns`, or when the
rollout stops (a verifiers limit or `@vf.stop` condition: the interception refuses the next call, or the trace is
already marked stopped). Whatever the model sends (broken JSON arguments, unknown tools, wrongly typed arguments, an
empty reply) is answered with an error message it can act on and counted in the stats; it never ends the rollout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from composer_agent.compaction import exclude_rejected, fresh_context, resolve_threshold, summarize
from composer_agent.model import Completion, ContextOverflow, ModelClient, RolloutStopped
from composer_agent.stats import AgentStats, CompactionRecord
from composer_agent.tools import Toolbox
from composer_prime.text import estimate_tokens

if TYPE_CHECKING:
    from composer_agent.config import ComposerAgentConfig

logger = logging.getLogger(__name__)

EMPTY_REPLY_NUDGE = (
    "Your last reply was empty: no text and no tool call. Continue the task by calling a tool, "
    "or call finish when the task is done."
)


class AgentLoop:
    def __init__(
        self,
        model: ModelClient,
        toolbox: Toolbox,
        config: ComposerAgentConfig,
        stats: AgentStats,
        stopped: Any = None,
        trace: Any = None,
    ):
        self.model = model
        self.toolbox = toolbox
        self.config = config
        self.stats = stats
        self._stopped = stopped or (lambda: None)
        """Returns the trace's stop condition once verifiers stopped the rollout, else None."""
        self._trace = trace
        """The rollout's live trace (None outside a rollout): rejected summary attempts are marked on it."""
        self._pending: CompactionRecord | None = None
        """The last compaction, until the first turn on its fresh context reports the context size."""

    async def run(self, head: list[dict[str, Any]], task: list[dict[str, Any]], window: int | None) -> str:
        """Run to the end; returns (and records) the finish reason."""
        self.stats.window = window
        self.stats.threshold = resolve_threshold(self.config.compaction, window)
        start = time.monotonic()
        try:
            self.stats.finish_reason = await self._run(head, task)
        except RolloutStopped as e:
            self.stats.finish_reason = f"stopped: {self._stopped() or e}"
        except ContextOverflow:
            self.stats.finish_reason = "context_overflow"
        except asyncio.CancelledError:
            # verifiers cancels the loop at its agent timeout (it stops the trace as `agent_timeout` itself).
            self.stats.finish_reason = "cancelled"
            raise
        finally:
            self.stats.loop_seconds = time.monotonic() - start
        return self.stats.finish_reason

    async def _run(self, head: list[dict[str, Any]], task: list[dict[str, Any]]) -> str:
        specs = self.toolbox.specs()
        messages = [*head, *task]
        accepted: list[dict[str, Any]] | None = None  # the last request the server accepted: an overflow's fallback
        while True:
            if (condition := self._stopped()) is not None:
                return f"stopped: {condition}"
            if self.stats.turns >= self.config.max_turns:
                return "max_turns"
            try:
                completion = await self._complete(messages, specs)
            except ContextOverflow:
                # The window is smaller than the threshold assumed (or one turn grew past it): compact from the last
                # request that fit. Its reply and tool results are lost to the summary, not to the work directory.
                if accepted is None or not self._may_compact():
                    raise
                compacted = await self._compact(head, task, accepted, estimate_tokens(messages), specs)
                if compacted is None:
                    return "compaction_failed"
                messages, accepted = compacted, None
                continue
            accepted = list(messages)
            self.stats.turns += 1
            if self._pending is not None:
                self._pending.context_after = (
                    completion.prompt_tokens if completion.prompt_tokens is not None else estimate_tokens(messages)
                )
                self._pending = None
            context = _context_tokens(completion, messages)
            messages.append(completion.message)

            if not completion.tool_calls:
                if completion.content.strip():
                    return "text_reply"
                self.stats.error("empty_reply")
                nudge = {"role": "user", "content": EMPTY_REPLY_NUDGE}
                messages.append(nudge)
                context += estimate_tokens(nudge["content"])
            else:
                for call in completion.tool_calls:
                    function = call.get("function") or {}
                    start = time.monotonic()
                    result = await self.toolbox.call(function.get("name"), function.get("arguments"))
                    self.stats.tool_seconds += time.monotonic() - start
                    self.stats.tool_calls += 1
                    if result.error is not None:
                        self.stats.error(result.error)
                    if result.finish:
                        return "finish"
                    messages.append({"role": "tool", "tool_call_id": call.get("id") or "", "content": result.content})
                    context += estimate_tokens(result.content)

            threshold = self.stats.threshold
            if threshold is None or context < threshold or not self._may_compact():
                continue
            compacted = await self._compact(head, task, messages, context, specs)
            if compacted is None:
                return "compaction_failed"
            messages, accepted = compacted, None

    async def _complete(self, messages: list[dict[str, Any]], specs: list[dict[str, Any]]) -> Completion:
        start = time.monotonic()
        try:
            return await self.model.complete(messages, specs)
        finally:
            self.stats.model_seconds += time.monotonic() - start

    def _may_compact(self) -> bool:
        if self.stats.threshold is None:
            return False
        if len(self.stats.compactions) < self.config.compaction.max_compactions:
            return True
        if not self.stats.compaction_cap_reached:
            logger.info(
                "compaction cap of %d reached; continuing on the full context", self.config.compaction.max_compactions
            )
        self.stats.compaction_cap_reached = True
        return False

    async def _compact(
        self,
        head: list[dict[str, Any]],
        task: list[dict[str, Any]],
        messages: list[dict[str, Any]],
        context: int,
        specs: list[dict[str, Any]],
    ) -> list[dict[str, Any]] | None:
        """Summarise `messages` and return the fresh context, or None when every summary attempt was empty."""
        start = time.monotonic()
        first_node = len(self._trace.nodes) if self._trace is not None else 0
        summary = None
        try:
            summary = await summarize(
                self.model,
                messages,
                specs,
                self.config.compaction,
                window=self.stats.window,
                context=context,
                keep=len(head) + len(task),
            )
        finally:
            self.stats.model_seconds += time.monotonic() - start
            # Also when the rollout stopped mid-compaction: the attempts made so far were not accepted.
            if self._trace is not None:
                exclude_rejected(self._trace, first_node, accepted=summary is not None and summary.text is not None)
        self.stats.failed_summaries += summary.empty
        if summary.text is None:
            return None
        fresh = fresh_context(head, task, summary.text, self.config.compaction.summary_max_tokens)
        self._pending = CompactionRecord(
            context_before=context,
            context_after=estimate_tokens(fresh),
            summary_tokens=summary.tokens,
            attempts=summary.attempts,
            turn=self.stats.turns,
        )
        self.stats.compactions.append(self._pending)
        return fresh


def _context_tokens(completion: Completion, messages: list[dict[str, Any]]) -> int:
    """Tokens in the context after this turn: usage when the server reports it, else an estimate."""
    if completion.prompt_tokens is not None and completion.completion_tokens is not None:
        return completion.prompt_tokens + completion.completion_tokens
    return estimate_tokens(messages) + estimate_tokens(completion.message)
