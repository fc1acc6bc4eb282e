"""One query to one teacher: bounded concurrency, a per-request timeout, bounded retries with backoff.

Requests are plain OpenAI chat completions over httpx. A 429, a 5xx, a timeout or a connection error is retried
(tenacity: exponential backoff with jitter, at most `max_retries` retries); any other
status, or a body that is not a chat completion, fails at once. At most `max_concurrency` requests per teacher are
in flight in one process: `semaphore` keeps one per teacher for the process, shared by every trace scored in it.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from composer_prime.teachers.cache import Answer
from composer_prime.teachers.config import TeacherConfig
from composer_prime.text import estimate_tokens

RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
BACKOFF_MAX_S = 8.0

_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str, str], asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)
"""Per event loop (a semaphore belongs to one loop), per teacher."""


class TeacherError(RuntimeError):
    """A teacher gave no usable answer; `retryable` says whether another attempt may help."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def semaphore(teacher: TeacherConfig) -> asyncio.Semaphore:
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    key = (teacher.name, teacher.base_url, teacher.model)
    if key not in per_loop:
        per_loop[key] = asyncio.Semaphore(teacher.max_concurrency)
    return per_loop[key]


def _retryable(error: BaseException) -> bool:
    return isinstance(error, TeacherError) and error.retryable


async def _post(client: httpx.AsyncClient, teacher: TeacherConfig, body: dict[str, Any]) -> Answer:
    headers = {}
    if teacher.api_key_var:
        key = os.environ.get(teacher.api_key_var, "").strip()
        if not key:  # an empty bearer token is not a valid header: the request would fail in httpx, and be retried
            raise TeacherError(
                f"{teacher.name}: ${teacher.api_key_var} (its api_key_var) is not set in the env server's environment",
                retryable=False,
            )
        headers["Authorization"] = f"Bearer {key}"
    try:
        response = await client.post(f"{teacher.endpoint()}/chat/completions", json=body, headers=headers)
    except ValueError as e:  # a malformed $base_url_var: this teacher is unusable until it is fixed
        raise TeacherError(f"{teacher.name}: {e}", retryable=False) from e
    except (httpx.TimeoutException, httpx.TransportError) as e:
        raise TeacherError(f"{teacher.name}: {type(e).__name__}: {e}", retryable=True) from e
    if response.status_code != 200:
        raise TeacherError(
            f"{teacher.name}: HTTP {response.status_code}: {response.text[:200]}",
            retryable=response.status_code in RETRY_STATUS,
        )
    try:
        payload = response.json()
        text = payload["choices"][0]["message"].get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise TeacherError(f"{teacher.name}: not a chat completion: {response.text[:200]}", retryable=False) from e
    usage = payload.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens")
    return Answer(
        text=str(text),
        input_tokens=int(prompt_tokens) if isinstance(prompt_tokens, int) else estimate_tokens(body["messages"]),
        output_tokens=int(completion_tokens) if isinstance(completion_tokens, int) else estimate_tokens(str(text)),
    )


async def ask(teacher: TeacherConfig, messages: list[dict[str, str]]) -> Answer:
    """The teacher's answer to `messages`; raises TeacherError when every attempt failed.

    The caller holds `semaphore(teacher)`: concurrency is bounded where the budget is reserved."""
    body = {
        "model": teacher.model,
        "messages": messages,
        "max_tokens": teacher.max_output_tokens,
        "temperature": teacher.temperature,
    }
    timeout = httpx.Timeout(teacher.timeout_s, connect=min(10.0, teacher.timeout_s))
    async with httpx.AsyncClient(timeout=timeout) as client:
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(teacher.max_retries + 1),
            wait=wait_exponential(multiplier=teacher.retry_backoff_s, max=BACKOFF_MAX_S)
            + wait_random(0, teacher.retry_backoff_s),
            reraise=True,
        ):
            with attempt:
                try:
                    async with asyncio.timeout(teacher.timeout_s):
                        return await _post(client, teacher, body)
                except TimeoutError as e:
                    raise TeacherError(f"{teacher.name}: no answer in {teacher.timeout_s:g}s", True) from e
    raise AssertionError("unreachable: tenacity re-raises the last error")
