"""Text budgets shared by the agent, the teacher hook and compaction: a token estimate and middle truncation."""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4
"""Rough characters per token, used only where a server reports no `usage`."""


def estimate_tokens(value: str | list[dict[str, Any]] | dict[str, Any]) -> int:
    """Token estimate at four characters per token; messages are measured as their JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and tail of `text` within `max_chars`, saying how much was cut from the middle.

    The middle goes because the head of a command's output says what ran and the tail says how it ended."""
    if len(text) <= max_chars:
        return text
    marker = "\n[... {n} characters truncated ...]\n"
    budget = max(0, max_chars - len(marker.format(n=len(text))))
    head = text[: (budget + 1) // 2]
    tail = text[len(text) - budget // 2 :] if budget // 2 else ""
    return head + marker.format(n=len(text) - len(head) - len(tail)) + tail
