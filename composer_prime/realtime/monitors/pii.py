"""Secrets and personal data never train: every session is scanned where it would train, before it becomes an episode.

What trains is the token stream, so the scan reads the token streams decoded with the served model's tokenizer
(`pii.tokenizer`), each branch as one text (a secret split across a context and a sampled segment is still found),
plus `messages`, `user` and `info`. A session with any finding is dropped (counted `pii_dropped`), not redacted:
redacting the text would leave the secret in the tokens, and re-tokenizing a redacted text is the product's own
renderer's job (a `[pii] hooks` entry can do it). Rejected spool lines are never copied into the state (`spool.py`
keeps their file, offset, length and hash), and their error detail passes through `redact`.

`PATTERNS` is the detector: one regular expression per kind, each with a test
(tests/unit/realtime/monitors/test_realtime_pii.py).
detect-secrets 1.5 was measured against the first 18 samples: its named plugins found 7 kinds (none of `sk-proj-`,
`sk-ant-`, `github_pat_`, AWS secret keys, Google, Hugging Face or npm keys, phone numbers, SSNs, e-mail addresses),
and its entropy plugins fired on every sample, an e-mail address and an SSN included, so on ordinary code as well.

Extra hooks (`[pii] hooks`, import paths of `hook(session) -> session | None`) run after the scan; None or an
exception drops the session (`pii_dropped`, `pii_hook_error`).
"""

from __future__ import annotations

import base64
import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime.records import SessionRecord

PATTERNS: dict[str, re.Pattern[str]] = {
    "url_password": re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@'\"]*:[^\s/@'\"]+@[^\s/]+"),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    "private_key": re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    "aws_access_key": re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    # 40 characters of base64 with upper, lower and a digit, standing alone (a git SHA is lower-case hex); `=` may
    # precede it (`AWS_SECRET_ACCESS_KEY=...`): base64 pads only at its end.
    "aws_secret_key": re.compile(
        r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[a-z])"
        r"(?=[A-Za-z0-9/+]*[0-9])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"
    ),
    "openai_key": re.compile(r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"),
    "anthropic_key": re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    "stripe_key": re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    "github_token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    "gitlab_token": re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    "slack_token": re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"),
    "google_api_key": re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),
    "huggingface_token": re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    "npm_token": re.compile(r"\bnpm_[A-Za-z0-9]{36}"),
    "pypi_token": re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}"),
    "groq_key": re.compile(r"\bgsk_[A-Za-z0-9]{48,}"),
    "digitalocean_token": re.compile(r"\bdo[por]_v1_[a-f0-9]{64}"),
    "azure_storage_key": re.compile(r"\bAccountKey=[A-Za-z0-9+/]{86}=="),
    "sendgrid_key": re.compile(r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    "phone_number": re.compile(
        r"(?<![\w.+-])(?:\+\d{1,3}[ .-]?)?\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?![\w-])"
        r"|(?<![\w+])\+\d{1,3}[ .-]?\d{2,4}(?:[ .-]?\d{2,4}){2,4}(?!\w)"
    ),
    "ssn": re.compile(r"(?<![\w-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-])"),
}
"""What the scan looks for, by kind."""

Hook = Callable[[SessionRecord], "SessionRecord | None"]


class PIIConfig(BaseModel):
    """The scan for secrets and personal data, and extra scrubbing hooks."""

    model_config = ConfigDict(extra="forbid")

    scan: bool = True
    """Drop every session in which `PATTERNS` finds something: in its decoded token streams (what trains), messages,
    user and info. Off only where the product scrubs upstream."""
    tokenizer: str | None = None
    """The served model's tokenizer (an HF model dir or hub id) that decodes token streams for the scan. `composer-
    prime realtime` sets it to `model_dir` (single-process) or PRIME-RL's `model.name` (cluster) when unset."""
    hooks: list[str] = Field(default_factory=list)
    """Import paths (`module.function`) of extra hooks, run in order after the scan on every session before it trains."""


ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"\\/])")
"""A JSON or source-string escape: tool-call arguments reach the scan as JSON text (`...\\nghp_...`), where the
escape's letter would glue onto the secret and defeat the patterns' word anchors."""
BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}={0,2}")
MAX_BLOBS = 256
"""Base64 runs decoded per text, at most (a k8s `Secret`, a docker `auth`, `Authorization: Basic`)."""


def _unescape(match: re.Match[str]) -> str:
    code = match[1]
    if code[0] == "u":
        return chr(int(code[1:], 16))
    return " " if code in "nrtbf" else code


def views(text: str) -> Iterator[str]:
    """`text` as the scan reads it: as it is, with its string escapes undone, URL-decoded, and each base64 run that
    decodes to text."""
    yield text
    if "\\" in text:
        yield ESCAPE.sub(_unescape, text)
    if "%" in text:
        decoded = unquote(text)
        if decoded != text:
            yield decoded
    for n, match in enumerate(BASE64.finditer(text)):
        if n >= MAX_BLOBS:
            break
        blob = match[0].rstrip("=")
        try:
            raw = base64.b64decode(
                blob + "=" * (-len(blob) % 4), altchars=b"-_" if "-" in blob or "_" in blob else None, validate=True
            )
            inner = raw.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if inner.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in inner):
            yield inner


def find(text: str) -> list[str]:
    """The kinds in `PATTERNS` found in any of `text`'s `views`."""
    found: dict[str, None] = {}
    for view in views(text):
        found |= dict.fromkeys(name for name, pattern in PATTERNS.items() if pattern.search(view))
    return list(found)


def redact(text: str) -> str:
    """`text` with every finding replaced by `[<kind>]`."""
    for name, pattern in PATTERNS.items():
        text = pattern.sub(f"[{name}]", text)
    return text


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def load_hooks(paths: list[str]) -> list[Hook]:
    """Import every hook; a bad path raises ValueError naming it and the fix."""
    hooks = []
    for path in paths:
        module, _, name = path.rpartition(".")
        try:
            hook = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(
                f"pii.hooks: {path!r} does not import ({err}); give `module.function` of an installed module"
            ) from None
        if not callable(hook):
            raise ValueError(f"pii.hooks: {path!r} is not a function")
        hooks.append(hook)
    return hooks


class Scrubber:
    """The scan and the hooks of one `PIIConfig`, with its tokenizer loaded once."""

    def __init__(self, config: PIIConfig):
        self.hooks = load_hooks(config.hooks)
        self.tokenizer: Any = None
        if config.scan:
            if not config.tokenizer:
                raise ValueError(
                    "pii.tokenizer is unset: the scan decodes the token streams that train; set it to "
                    "the served model's tokenizer (a model dir or hub id)"
                )
            from transformers import AutoTokenizer

            try:
                self.tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
            except (OSError, ValueError) as err:
                raise ValueError(
                    f"pii.tokenizer = {config.tokenizer!r} does not load ({err}); give the served model's dir or hub id"
                ) from None

    def findings(self, session: SessionRecord) -> list[str]:
        """`where:kind` of everything the scan finds in `session`."""
        found: list[str] = []
        for b, branch in enumerate(session.branches):
            ids = [t for segment in branch.segments for t in segment.token_ids]
            found += [f"branches[{b}]:{k}" for k in find(self.tokenizer.decode(ids, skip_special_tokens=False))]
        for where, value in (
            ("messages", session.messages),
            ("user", session.user),
            ("info", session.info),
            ("group", session.group),
        ):
            found += [f"{where}:{k}" for k in sorted({k for text in _texts(value) for k in find(text)})]
        return found

    def __call__(self, session: SessionRecord) -> tuple[SessionRecord | None, str | None]:
        """(session or None, why it was dropped)."""
        if self.tokenizer is not None:
            found = self.findings(session)
            if found:
                return None, f"pii_dropped: {', '.join(found)}"
        for hook in self.hooks:
            try:
                result = hook(session)
            except Exception as err:  # noqa: BLE001 - a failing scrubber must drop, not crash ingest
                return None, f"pii_hook_error: {getattr(hook, '__name__', hook)}: {err}"
            if result is None:
                return None, f"pii_dropped: {getattr(hook, '__name__', hook)}"
            session = result
        return session, None
