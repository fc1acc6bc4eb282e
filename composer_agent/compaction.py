"""Self-summarization: the model compacts its own context and continues from its summary.

Composer works past its context window by having the model summarise its progress when the context grows long and
continuing from that summary; the summary turns are trained with the task's final reward, so the model learns to
write summaries that lead to solved tasks (Cursor, "Composer: building a fast frontier model with RL", 2025, and
"Training Composer for longer horizons", 2026: about half the compaction error of a prompted baseline at a fifth of
the tokens).

Here, after a turn whose context (prompt + completion tokens from `usage`, or an estimate when a server reports
none, plus the estimated size of the tool output appended since) reaches the threshold:

1. The summary prompt is appended to the *current* conversation as a user message and the model is sampled with
   `tool_choice="none"` (the tool list stays in the request, so the rendered prefix is the one the model has been
   working in). The reply is a sampled node on the current branch of the trace, so it carries the final reward.
2. An empty reply is resampled from the same request, at most `summary_attempts` calls in all. A rejected attempt is
   a leaf of its own under the summary prompt; it is kept out of training (`exclude_rejected`): its tokens are
   masked, and on verifiers 0.4.0 its branch is marked a `compaction_attempt`, which makes `Branch.trainable` false.
   So only the accepted summary trains, in the branch that also holds the turns before it. When every attempt is
   empty (`compaction_failed`), the last attempt's branch stays trainable with its own tokens masked, so the turns
   before it still train once.
3. The conversation restarts as [system, task, summary framed as a user message]. That prompt shares the system and
   task nodes with the old branch and forks after them, so it opens a new branch of the trace (one training sample
   per branch in PRIME-RL).

The threshold defaults to `max(window - reserve_tokens, window // 2)` with the window from `GET /v1/models`, the same
rule verifiers 0.4.0's built-in compaction uses, so summaries are written with room to spare.

The summary call's `max_tokens` is sized to fit: `summary_max_tokens`, lowered to what the window leaves after the
request (the context plus the summary prompt, and a margin for the estimate). When that leaves less than
`MIN_SUMMARY_TOKENS`, or the server still refuses the request as too long, the request is shrunk: tool results and
long messages after the task are middle-truncated (to a quarter, then a sixteenth), at most `SHRINKS` times, before
the compaction gives up (`compaction_failed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from composer_agent.config import CompactionConfig
from composer_agent.model import ContextOverflow, ModelClient
from composer_prime.text import CHARS_PER_TOKEN, estimate_tokens, truncate_middle

if TYPE_CHECKING:
    import verifiers.v1 as vf

SUMMARY_PROMPT = """Your context is about to be reset. Write a summary that lets you continue the task from it alone.

Include:
- What is done: the changes made so far (files and what changed in them) and what you verified.
- What remains: the next concrete steps, in order.
- What you need to know: relevant file paths, function names, commands, error messages, test results, and any facts
  or constraints you discovered.

Be concise and specific. Reply with the summary as plain text; do not call any tools."""

RESUME_FRAMING = """Your context was reset to save space. This is the summary you wrote of your progress so far; the \
work directory is as you left it. Continue the task from here.

<summary>
{summary}
</summary>"""

EMPTY_SUMMARY_NOTE = "(empty summary)"

MIN_SUMMARY_TOKENS = 256
"""Below this many tokens left for the summary, the request is shrunk rather than sent."""

SIZE_MARGIN = 256
"""Tokens kept free in the window on top of the estimated request (the estimate is four characters per token)."""

SHRINKS = 2
"""Times an overflowing summary request is shrunk before the compaction gives up."""


def default_threshold(window: int, reserve_tokens: int) -> int:
    """Compact with `reserve_tokens` to spare below the window; small windows compact at half."""
    return max(window - reserve_tokens, window // 2)


def resolve_threshold(config: CompactionConfig, window: int | None) -> int | None:
    """The threshold in force: the configured one, else one derived from the window, else None (compaction off)."""
    if not config.enabled:
        return None
    if config.summarize_at_tokens is not None:
        return config.summarize_at_tokens
    if window is None:
        return None
    return default_threshold(window, config.reserve_tokens)


def fresh_context(
    head: list[dict[str, Any]], task: list[dict[str, Any]], summary: str, max_tokens: int
) -> list[dict[str, Any]]:
    """The post-compaction prompt: system messages, the task, and the summary (bounded) as a user message."""
    bounded = truncate_middle(summary.strip(), max_tokens * CHARS_PER_TOKEN)
    return [*head, *task, {"role": "user", "content": RESUME_FRAMING.format(summary=bounded)}]


@dataclass
class Summary:
    text: str | None
    """The accepted summary; None when every attempt came back empty."""
    tokens: int
    attempts: int
    empty: int


async def summarize(
    model: ModelClient,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    config: CompactionConfig,
    *,
    window: int | None = None,
    context: int | None = None,
    keep: int = 0,
) -> Summary:
    """Ask the model for a summary of `messages`, tools disabled; resample an empty reply a bounded number of times.

    `window` and `context` (the tokens of `messages`, as measured by the loop) size the summary's `max_tokens`; the
    first `keep` messages (system and task) are never shrunk. Raises RolloutStopped when the interception refuses
    the call (the rollout stopped) — the caller ends cleanly."""
    empty = 0
    attempts = 0
    shrinks = 0
    divisor = 1
    while attempts < config.summary_attempts:
        current = messages if divisor == 1 else shrink(messages, keep, divisor)
        request = [*current, {"role": "user", "content": SUMMARY_PROMPT}]
        size = estimate_tokens(request) if divisor > 1 or context is None else context + estimate_tokens(SUMMARY_PROMPT)
        budget = summary_budget(config.summary_max_tokens, window, size)
        if budget is None:
            if shrinks == SHRINKS:
                break
            shrinks, divisor = shrinks + 1, divisor * 4
            continue
        attempts += 1
        try:
            completion = await model.complete(request, tools, tool_choice="none", max_tokens=budget)
        except ContextOverflow:
            if shrinks == SHRINKS:
                break
            shrinks, divisor = shrinks + 1, divisor * 4
            continue
        text = completion.content.strip()
        if text:
            tokens = completion.completion_tokens if completion.completion_tokens is not None else estimate_tokens(text)
            return Summary(text, tokens, attempts, empty)
        empty += 1
    return Summary(None, 0, attempts, empty)


def summary_budget(max_tokens: int, window: int | None, request_tokens: int) -> int | None:
    """The summary's `max_tokens`: `max_tokens`, lowered to what the window leaves after the request and a margin;
    None when that is below MIN_SUMMARY_TOKENS (the request must shrink first)."""
    if window is None:
        return max_tokens
    room = window - request_tokens - SIZE_MARGIN
    return min(max_tokens, room) if room >= MIN_SUMMARY_TOKENS else None


def shrink(messages: list[dict[str, Any]], keep: int, divisor: int) -> list[dict[str, Any]]:
    """`messages` with every string content after the first `keep` messages middle-truncated to 1/`divisor` of its
    length (long ones only; the structure, roles and tool calls stay)."""
    out = list(messages[:keep])
    for message in messages[keep:]:
        content = message.get("content")
        if isinstance(content, str) and len(content) > 400:
            message = {**message, "content": truncate_middle(content, max(400, len(content) // divisor))}
        out.append(message)
    return out


def exclude_rejected(trace: vf.Trace, first_node: int, accepted: bool) -> int:
    """Keep the rejected summary attempts sampled since node `first_node` out of training; returns how many.

    The attempts are the sampled nodes the summary calls added, in order. When `accepted`, the last one is the
    accepted summary and stays as it is; otherwise every attempt is masked, and the last one's branch stays trainable
    so that the turns before the compaction still train once."""
    attempts = [i for i in range(first_node, len(trace.nodes)) if trace.nodes[i].sampled]
    rejected = attempts[:-1] if accepted else attempts
    for i in rejected:
        node = trace.nodes[i]
        node.mask = [False] * len(node.mask)
        if i == attempts[-1] or node.parent is None or not hasattr(node, "semantic_parents"):
            continue  # the snapshot PRIME-RL pins has no semantic links; the mask is what its trainer reads
        from verifiers.v1.semantic import ParentLink

        link = ParentLink(node=node.parent, type="compaction_attempt")
        if link not in node.semantic_parents:
            node.semantic_parents.append(link)
    return len(rejected)
