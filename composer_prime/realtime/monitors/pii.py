"""Secrets and personal data never train: every session is scanned where it would train, before it becomes an episode.

What trains is the token stream, so the scan reads the token streams decoded with the served model's tokenizer
(`pii.tokenizer`), each branch as one text (a secret split across a context and a sampled segment is still found),
plus `messages`, `user` and `info`. A session with any finding is dropped (counted `pii_dropped`), not redacted:
redacting the text would leave the secret in the tokens, and re-tokenizing a redacted text is the product's own
renderer's job (a `[pii] hooks` entry can do it). Rejected spool lines are never copied into the state (`spool.py`
keeps their file, offset, length and hash), and their error detail passes through `redact`.

The rules are `secret_rules.RULES` (by context, by shape, personal data). A text is scanned once, as secret scanners
scan a file: its `views` (as it is; string escapes undone; URL-decoded; string literals joined across `+`, `\\\\` and
line breaks; each base64 run that decodes to text) are joined into one string, which one automaton over every rule
reads in one pass (hyperscan, each rule compiled in prefilter mode, which matches a superset of what the rule
matches: its lookarounds dropped); only the rules it reports run their own expression and check, on that string.
Without hyperscan (a platform it has no wheel for) every rule runs: the same findings, slower.
detect-secrets 1.5 was measured against the first 18 samples: its named plugins found 7 kinds, and its entropy
plugins fired on every sample, an e-mail address and an SSN included, so on ordinary code as well.

Extra hooks (`[pii] hooks`, import paths of `hook(session) -> session | None`) run after the scan; None or an
exception drops the session (`pii_dropped`, `pii_hook_error`).
"""

from __future__ import annotations

import base64
import bisect
import importlib
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.realtime.monitors.secret_rules import RULES, Rule
from composer_prime.realtime.records import SessionRecord

Hook = Callable[[SessionRecord], "SessionRecord | None"]


class PIIConfig(BaseModel):
    """The scan for secrets and personal data, and extra scrubbing hooks."""

    model_config = ConfigDict(extra="forbid")

    scan: bool = True
    """Drop every session in which a rule of `secret_rules.RULES` finds something: in its decoded token streams (what trains), messages,
    user and info. Off only where the product scrubs upstream."""
    tokenizer: str | None = None
    """The served model's tokenizer (an HF model dir or hub id) that decodes token streams for the scan. `composer-
    prime realtime` sets it to `model_dir` (single-process) or PRIME-RL's `model.name` (cluster) when unset."""
    hooks: list[str] = Field(default_factory=list)
    """Import paths (`module.function`) of extra hooks, run in order after the scan on every session before it trains."""


SEPARATOR = "\n\x00\n"
"""Between the views of one text: no rule matches across it."""


@cache
def _databases() -> tuple[Any, Any] | None:
    """Every rule in one hyperscan database (prefilter mode, each rule reported once), and the `locator`s of the
    rules that have one in a second (exact, every end reported). Compiled once per process, on first use; None
    without hyperscan."""
    try:
        import hyperscan
    except ImportError:
        return None

    def compile_(expressions: dict[int, str], flags: int) -> Any:
        database = hyperscan.Database()
        database.compile(
            expressions=[e.encode() for e in expressions.values()],
            ids=list(expressions),
            elements=len(expressions),
            flags=[flags | (hyperscan.HS_FLAG_MULTILINE if RULES[i].pattern.flags & re.M else 0) for i in expressions],
        )
        return database

    every = {i: r.pattern.pattern for i, r in enumerate(RULES)}
    located = {i: r.locator for i, r in enumerate(RULES) if r.locator is not None}
    flags = hyperscan.HS_FLAG_UTF8
    return compile_(every, flags | hyperscan.HS_FLAG_PREFILTER | hyperscan.HS_FLAG_SINGLEMATCH), compile_(
        located, flags
    )


_scratch = threading.local()
"""Each thread scans with its own hyperscan scratch spaces (one may not be shared by concurrent scans)."""
NON_ASCII = re.compile(r"[^\x00-\x7f]")
MAX_ENDS = 4096
"""Places a located rule may end past which it runs over the whole text instead."""


def _scan(database: Any, data: bytes, on_match: Callable[..., Any]) -> None:
    import hyperscan

    spaces = _scratch.__dict__.setdefault("spaces", {})
    if id(database) not in spaces:
        spaces[id(database)] = hyperscan.Scratch(database)
    database.scan(data, match_event_handler=on_match, scratch=spaces[id(database)])


ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"\\/])")
"""A JSON or source-string escape: tool-call arguments reach the scan as JSON text (`...\\nghp_...`), where the
escape's letter would glue onto the secret and defeat the patterns' word anchors."""
JOIN = re.compile(
    r"""(["'])(?:[ \t]*(?:\+|\.\.?|&|\|\|)[ \t]*(?:\\?\r?\n[ \t]*)?|[ \t]*\\?\r?\n[ \t]*(?:(?:\+|\.\.?|&)[ \t]*)?|[ \t]+)\1"""
)
"""Two string literals glued by concatenation (`"ghp_ab" + "cd"`, `"..." \\`, implicit across a line break, PHP's
`.`, Lua's `..`, VB's `&`): removed, the view holds the literal the code builds."""
BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])(?:[A-Za-z0-9+/]{24,}={0,2}|[A-Za-z0-9_-]{24,}={0,2})(?![A-Za-z0-9+/_-])")
"""A run of base64 or of its URL-safe alphabet (a path such as `pkg/sub_module/...` mixes the two: not a blob)."""
MAX_BLOBS = 256
"""Base64 runs decoded per text, at most (a k8s `Secret`, a docker `auth`, `Authorization: Basic`)."""


def _unescape(match: re.Match[str]) -> str:
    code = match[1]
    if code[0] == "u":
        return chr(int(code[1:], 16))
    return "\n" if code in "nr" else " " if code in "tbf" else code


def views(text: str) -> Iterator[str]:
    """`text` as the scan reads it: as it is, with its string escapes undone, URL-decoded, with its string literals
    joined, and each base64 run that decodes to text."""
    yield text
    base = text
    if "\\" in text:
        unescaped = ESCAPE.sub(_unescape, text)
        if unescaped != text:
            yield unescaped
            base = unescaped
    if "%" in text:
        decoded = unquote(text)
        if decoded != text:
            yield decoded
    if JOIN.search(base):
        yield JOIN.sub("", base)
    for n, match in enumerate(BASE64.finditer(text)):
        if n >= MAX_BLOBS:
            break
        blob = match[0].rstrip("=")
        if blob.islower() or blob.isupper():
            continue  # an identifier or a hex digest; encoded text mixes cases
        try:
            raw = base64.b64decode(
                blob + "=" * (-len(blob) % 4), altchars=b"-_" if "-" in blob or "_" in blob else None, validate=True
            )
            inner = raw.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if inner.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in inner):
            yield inner


def candidates(text: str) -> dict[int, list[tuple[int, int]] | None]:
    """The rules that may match `text` (by index in `RULES`), each with the stretches of `text` where it may (None:
    anywhere): one pass of the automaton (every rule, anywhere, without hyperscan)."""
    databases = _databases()
    if databases is None:
        return dict.fromkeys(range(len(RULES)))
    data = text.encode("utf-8", "replace")
    hits: dict[int, list[tuple[int, int]] | None] = {}
    _scan(databases[0], data, lambda i, *_: hits.__setitem__(i, None))
    located = [i for i in hits if RULES[i].locator is not None]
    if located:
        ends: dict[int, list[int]] = {i: [] for i in located}
        _scan(databases[1], data, lambda i, _start, end, *_: ends[i].append(end) if i in ends else None)
        to_char = None if text.isascii() else _char_offsets(text)  # ASCII: byte offsets are character offsets
        for i, at in ends.items():
            if len(at) <= MAX_ENDS:
                hits[i] = _stretches(at if to_char is None else [to_char(end) for end in at], RULES[i].span, len(text))
    return hits


def _char_offsets(text: str) -> Callable[[int], int]:
    """The character offset in `text` of a byte offset in its UTF-8 encoding."""
    wide = [(m.start(), len(m[0].encode("utf-8", "replace")) - 1) for m in NON_ASCII.finditer(text)]
    starts, extra = [], []  # byte offset of each non-ASCII character, and the extra bytes before and in it
    total = 0
    for char, more in wide:
        starts.append(char + total)
        total += more
        extra.append(total)
    return lambda end: end - (extra[k - 1] if (k := bisect.bisect_left(starts, end)) else 0)


def _stretches(ends: list[int], span: int, size: int) -> list[tuple[int, int]]:
    """The stretches `[end - span, end + 1)` around each end, merged where they overlap."""
    merged: list[tuple[int, int]] = []
    for end in ends:  # hyperscan reports them in order
        lo, hi = max(0, end - span), min(size, end + 1)
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _hits(r: Rule, text: str, stretches: list[tuple[int, int]] | None = None) -> Iterator[re.Match[str]]:
    """The matches of `r` in `text` that pass its check; with `stretches`, those that start in one (each match found
    there is matched again on the whole text, where its look-aheads see past the stretch)."""
    if stretches is None:
        yield from (m for m in r.pattern.finditer(text) if r.check is None or r.check(m))
        return
    for lo, hi in stretches:
        for m in r.pattern.finditer(text, lo, hi):
            whole = r.pattern.match(text, m.start())
            if whole is not None and (r.check is None or r.check(whole)):
                yield whole


def find(text: str) -> list[str]:
    """The kinds of `secret_rules.RULES` found in `text`: its `views` joined and scanned once."""
    scan = SEPARATOR.join(views(text))
    found = candidates(scan)
    return [RULES[i].name for i in sorted(found) if next(_hits(RULES[i], scan, found[i]), None) is not None]


def redact(text: str) -> str:
    """`text` with every finding replaced by `[<kind>]`."""
    for i in sorted(candidates(text)):
        r = RULES[i]
        text = r.pattern.sub(lambda m, r=r: f"[{r.name}]" if r.check is None or r.check(m) else m[0], text)
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

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`: the fast tokenizer's own decoder where there is one (transformers' `decode` first
        checks every id in Python, which cost more than the scan), as the tokenizer writes it."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:
            return backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def findings(self, session: SessionRecord) -> list[str]:
        """`where:kind` of everything the scan finds in `session`. The fields other than the token streams are
        scanned as one text, and one by one only when that finds something (to say where)."""
        found: list[str] = []
        for b, branch in enumerate(session.branches):
            ids = list(itertools.chain.from_iterable(segment.token_ids for segment in branch.segments))
            found += [f"branches[{b}]:{k}" for k in find(self.decode(ids))]
        fields = {"messages": session.messages, "user": session.user, "info": session.info, "group": session.group}
        texts = {where: SEPARATOR.join(_texts(value)) for where, value in fields.items()}
        if find(SEPARATOR.join(texts.values())):
            found += [f"{where}:{k}" for where, text in texts.items() for k in sorted(find(text))]
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
