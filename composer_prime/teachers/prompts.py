"""What a teacher sees for one step, and how its answer is read.

A step is one sampled assistant message. Its prompt holds the task, the trajectory before the step compacted to a
token budget (the last `recent_turns` turns verbatim, older turns replaced by one elision marker), the step's action
(text and tool calls) and what the tools answered. A turn is an assistant message with the tool messages that answer
it. Tokens are estimated at four characters each; no tokenizer is shared with any teacher.

The verdict is a JSON object `{"score": s, "hint": h}` with s in [-1, 1] and h a short note or null. An answer that
does not hold one is retried once with `STRICT_SUFFIX` appended to the instruction, then dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from composer_prime import evidence
from composer_prime.teachers.config import ContextConfig
from composer_prime.text import CHARS_PER_TOKEN, truncate_middle

HINT_CHARS = 400

INSTRUCTION = """You review one step of a coding agent's trajectory. The agent works in a repository through tools \
(bash, view, str_replace, create, search, finish). You see the task, the trajectory before the step (older turns \
may be elided), the step itself and what the tools answered.

Judge only this step: was it a good move toward solving the task, given what the agent knew at that point?
Reply with one JSON object and nothing else:
{"score": <number from -1 (clearly wrong or wasteful) through 0 (neutral) to 1 (clearly right)>, \
"hint": <null, or one or two sentences saying what the agent should have done instead>}"""

STRICT_SUFFIX = """

Your previous reply could not be read. Reply with exactly one JSON object, no prose and no code fence, \
for example {"score": -0.5, "hint": "Run the failing test before editing."}"""

ELISION = "[... {n} earlier turn(s) elided ...]"


class Verdict(BaseModel):
    score: float = Field(ge=-1.0, le=1.0)
    hint: str | None = None


@dataclass(frozen=True)
class Rendered:
    """One message of a trajectory as plain text."""

    role: str
    text: str


def message_text(message: Any) -> Rendered:
    """Plain text of a verifiers message (pydantic object or dict): content, then tool calls as `name(arguments)`."""
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
    text = evidence.message_text(message)
    for _, name, arguments in evidence.tool_calls(message):
        text += f"\n[tool call] {name}({json.dumps(arguments, ensure_ascii=False)})"
    return Rendered(str(role or "?"), text.strip())


def turns(history: list[Rendered]) -> list[list[Rendered]]:
    """Group messages into turns: an assistant message opens one; a user or tool message joins the current one."""
    grouped: list[list[Rendered]] = []
    for message in history:
        if message.role == "assistant" or not grouped:
            grouped.append([message])
        else:
            grouped[-1].append(message)
    return grouped


def _block(turn: list[Rendered], max_chars: int) -> str:
    return "\n".join(f"<{m.role}>\n{truncate_middle(m.text, max_chars)}\n</{m.role}>" for m in turn)


def render_context(task: str, history: list[Rendered], config: ContextConfig) -> str:
    """The task and the trajectory before the step within `config.context_tokens`.

    Keeps the task (cut to a third of the budget), then the most recent turns that fit, at most `recent_turns`;
    everything older is one elision marker."""
    budget = config.context_tokens * CHARS_PER_TOKEN
    task_text = truncate_middle(task, budget // 3)
    remaining = budget - len(task_text)
    grouped = turns(history)
    kept: list[str] = []
    for turn in reversed(grouped[-config.recent_turns :]):
        block = _block(turn, config.message_chars)
        if len(block) > remaining:
            if not kept:  # the step's own predecessor always shows, cut to what is left
                kept.append(truncate_middle(block, max(200, remaining)))
            break
        kept.append(block)
        remaining -= len(block)
    elided = len(grouped) - len(kept)
    parts = [f"# Task\n{task_text}", "# Trajectory before the step"]
    if elided:
        parts.append(ELISION.format(n=elided))
    parts.extend(reversed(kept))
    if not grouped:
        parts.append("(this is the first step)")
    return "\n\n".join(parts)


def step_messages(
    task: str, history: list[Rendered], action: Rendered, outcome: list[Rendered], config: ContextConfig, strict: bool
) -> list[dict[str, str]]:
    """The chat request for one step: instruction as system message, context + step + outcome as user message."""
    step = f"# The step to judge\n{_block([action], config.message_chars)}"
    result = _block(outcome, config.message_chars) if outcome else "(no tool output: the step ended the episode)"
    user = f"{render_context(task, history, config)}\n\n{step}\n\n# What the tools answered\n{result}"
    return [
        {"role": "system", "content": INSTRUCTION + (STRICT_SUFFIX if strict else "")},
        {"role": "user", "content": user},
    ]


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_verdict(text: str) -> Verdict | None:
    """The verdict in a teacher's answer, or None when it holds none (prose around one JSON object is tolerated)."""
    match = _OBJECT.search(text or "")
    if match is None:
        return None
    try:
        raw = json.loads(match.group(0))
        verdict = Verdict.model_validate(raw)
    except (json.JSONDecodeError, ValidationError, TypeError):
        return None
    hint = (verdict.hint or "").strip()
    return Verdict(score=verdict.score, hint=hint[:HINT_CHARS] or None)
