"""The model, reached only through the rollout's interception endpoint (chat completions with tools).

Every call goes to `endpoint` with the rollout's `secret` as bearer token, so the interception records each turn on
the trace (tokens and logprobs with PRIME-RL's train client) and enforces the rollout's limits and stop conditions.
A refusal because the rollout stopped (HTTP 400 "rollout stopped: ...", 409 "rollout concluded") is `RolloutStopped`,
which the loop treats as a clean end.

The loop runs in the verifiers worker process, on the host, while `endpoint` is the URL a program *inside the
runtime* would use (`Runtime.host_url`): for docker it may name the host by a container-side alias. `host_endpoint`
maps those aliases back to loopback; a remote runtime's endpoint is a public tunnel URL and is used as is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from openai import APIConnectionError, APIStatusError, AsyncOpenAI

logger = logging.getLogger(__name__)

CONTAINER_HOST_ALIASES = ("vf.host.internal", "host.docker.internal")
"""Names a container uses for the verifiers host (the docker runtime's egress-proxy alias and Docker Desktop's)."""

CONTEXT_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")
"""Model-card fields that report the context window (vLLM, OpenRouter and others)."""

CONTEXT_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "exceeds the context window",
    "reduce the length of the messages",
    "prompt is too long",
    "request entity too large",
)

_WINDOWS: dict[tuple[str, str], int] = {}
"""Context windows already discovered, by (model server URL, model)."""


class RolloutStopped(Exception):
    """The interception refused a call because the rollout stopped (a limit or a `@vf.stop` condition)."""


class ContextOverflow(Exception):
    """The model server refused the request as longer than its context window."""


def host_endpoint(endpoint: str) -> str:
    """The host-side URL of an interception endpoint handed to a runtime (container aliases -> 127.0.0.1)."""
    parts = urlsplit(endpoint)
    if parts.hostname in CONTAINER_HOST_ALIASES:
        netloc = "127.0.0.1" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return endpoint


@dataclass
class Completion:
    message: dict[str, Any]
    """The assistant message as returned, ready to be sent back in the next request."""
    content: str
    tool_calls: list[dict[str, Any]]
    prompt_tokens: int | None
    completion_tokens: int | None
    finish_reason: str | None


class ModelClient:
    def __init__(self, endpoint: str, secret: str, model: str, *, timeout_s: float, max_retries: int):
        self.endpoint = host_endpoint(endpoint).rstrip("/")
        self.secret = secret
        self.model = model
        self._client = AsyncOpenAI(
            base_url=self.endpoint,
            api_key=secret,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            max_retries=max_retries,
        )

    async def close(self) -> None:
        await self._client.close()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        tool_choice: str | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        try:
            response = await self._client.chat.completions.create(**body)
        except APIStatusError as e:
            detail = f"{e.message} {e.body or ''}"
            if e.status_code == 409 or (e.status_code == 400 and "rollout stopped" in detail):
                raise RolloutStopped(detail.strip()) from None
            if e.status_code in (400, 413) and any(m in detail.casefold() for m in CONTEXT_OVERFLOW_MARKERS):
                raise ContextOverflow(detail.strip()) from None
            raise
        if not response.choices:
            raise RuntimeError(f"model response {response.id!r} has no choices")
        choice = response.choices[0]
        message = choice.message.model_dump(exclude_none=True)
        for key in ("refusal", "annotations", "audio", "function_call"):
            if not message.get(key):
                message.pop(key, None)
        message["role"] = "assistant"
        message.setdefault("content", "")
        content = message["content"]
        if not isinstance(content, str):  # content parts: keep the text for the loop, the message as sent
            content = (
                "".join(p.get("text", "") for p in content if isinstance(p, dict)) if isinstance(content, list) else ""
            )
        tool_calls = message.get("tool_calls") or []
        if not tool_calls:
            message.pop("tool_calls", None)
        usage = response.usage
        return Completion(
            message=message,
            content=content,
            tool_calls=tool_calls,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            completion_tokens=usage.completion_tokens if usage is not None else None,
            finish_reason=choice.finish_reason,
        )


async def discover_window(candidates: list[tuple[str, dict[str, str]]], model: str) -> int | None:
    """The model's context window from the first `GET <base>/models` listing that reports one.

    `candidates` are (base URL, headers) pairs, tried in order: the interception endpoint (verifiers releases that
    relay `/v1/models`), then the model server the rollout's client points at."""
    for base, headers in candidates:
        key = (base.rstrip("/"), model)
        if key in _WINDOWS:
            return _WINDOWS[key]
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
                response = await client.get(f"{key[0]}/models", headers=headers)
            if response.status_code != 200:
                continue
            window = window_from_listing(response.json(), model)
        except (httpx.HTTPError, ValueError, APIConnectionError) as e:
            logger.debug("no model listing at %s: %s", base, e)
            continue
        if window is not None:
            _WINDOWS[key] = window
            return window
    return None


def window_from_listing(listing: Any, model: str) -> int | None:
    """The context window of `model` in an OpenAI-style `/models` listing (the only card, if ids differ)."""
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return None
    cards = [c for c in cards if isinstance(c, dict)]
    matching = [c for c in cards if c.get("id") == model] or (cards if len(cards) == 1 else [])
    for card in matching:
        for name in CONTEXT_WINDOW_FIELDS:
            value = card.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
