"""The session-log format (version 1): what a serving product appends to the spool, one JSON object per line.

Two record kinds share the spool, told apart by `kind`:

- `session`: one finished agent session as the serving engine saw it: the policy version that served it, when it
  started and ended, the composer-agent messages (for monitors and reports), and the token stream in branches of
  segments. A segment is either context (prompt, tool output: `sampled = false`) or model output (`sampled = true`)
  with the serving engine's logprob of every token: those become PRIME-RL's `inference_logprobs`, so the trainer's
  importance ratio and trust region treat a live session exactly like one of its own rollouts.
- `signal`: one outcome observed after the session, keyed by `session_id`: `edit` (kept or reverted, `after_s`
  after the session), `tests` (the user's test run: passed and failed counts), `thumbs` (up or down), `undo` (a
  follow-up turn that undid the change). Signals may arrive before their session is read and in any order.

Every record names `schema = "composer-session"` and `version = 1`; a reader refuses versions it does not know,
naming the version it reads. Times are Unix seconds from the product's clock (`spool` bounds clock skew).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

SCHEMA = "composer-session"
VERSION = 1


class Segment(BaseModel):
    """A run of tokens in a branch: context (not sampled) or model output with serving-time logprobs."""

    model_config = ConfigDict(extra="forbid")

    token_ids: list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    """Token ids, in order."""
    sampled: bool
    """True for tokens the served policy sampled (trained on), false for context (prompt, tool output, template)."""
    logprobs: list[float] | None = None
    """The serving engine's logprob of each sampled token (untempered, as vLLM's `logprobs` returns): required when
    `sampled`, absent otherwise."""


class Branch(BaseModel):
    """One flat token sequence of the session (a compaction restart begins a new branch, as in verifiers traces)."""

    model_config = ConfigDict(extra="forbid")

    segments: list[Segment] = Field(min_length=1)
    """The branch's segments, in order; concatenated they are the sequence the trainer sees."""


class Sampling(BaseModel):
    """How the serving engine sampled the session's model calls."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(ge=0)
    """Softmax temperature."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass (1.0: off)."""
    top_k: int = Field(0, ge=0)
    """Top-k cutoff (0: off)."""


class Workspace(BaseModel):
    """Where the session worked, for the monitors' dynamic check (`monitors.dynamic`): the repository the product
    names, the commit the session started from and the session's kept edits as one unified diff."""

    model_config = ConfigDict(extra="forbid")

    repository: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
    """A name in `monitors.edits_disable_tests.dynamic.repositories` (a folder holding one git repository per name)."""
    commit: str = Field(pattern=r"^[0-9a-f]{7,64}$")
    """The commit (hex) the session's edits apply to."""
    diff: str = Field(max_length=4 << 20)
    """The session's kept edits as `git diff` prints them (up to 4 MiB)."""


class SessionRecord(BaseModel):
    """One finished session of the served policy."""

    model_config = ConfigDict(extra="forbid")

    schema_: Literal["composer-session"] = Field(SCHEMA, alias="schema")
    """Always `composer-session`."""
    version: int
    """Format version; this reader reads 1."""
    kind: Literal["session"] = "session"
    session_id: str = Field(min_length=1, max_length=200)
    """Unique per session; signals refer to it."""
    policy_version: int = Field(ge=0)
    """The policy version (trainer step shipped) that served every model call of the session."""
    sampling: Sampling
    """The sampling settings of every model call of the session. The trainer's importance ratio compares its own
    distribution with the serving logprobs, so a session sampled otherwise than the trainer assumes
    (`spool.sampling`) is refused (`sampling_mismatch`)."""
    started_at: float
    """Unix seconds when the session began (product clock)."""
    ended_at: float
    """Unix seconds when the session ended (product clock); signal windows are counted from here."""
    user: str = ""
    """A pseudonymous user id (hashed by the product): reports count users, monitors never need more."""
    group: str = ""
    """Sessions sharing a group (a prompt cluster, a repository) share a reward baseline; empty: the cycle's batch."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The composer-agent messages of the session (OpenAI chat format with tool calls), for monitors and reports."""
    branches: list[Branch] = Field(min_length=1)
    """The token streams the policy saw and sampled."""
    workspace: Workspace | None = None
    """Where the session worked, when the product can say (`Workspace`): lets the monitors run the session's code
    against its repository's original tests."""
    info: dict[str, Any] = Field(default_factory=dict)
    """Anything else the product records (client version, repository id); carried into the episode untouched."""

    @model_validator(mode="after")
    def _check(self) -> SessionRecord:
        if self.ended_at < self.started_at:
            raise ValueError(f"ended_at = {self.ended_at} is before started_at = {self.started_at}")
        return self

    def sampled_tokens(self) -> int:
        return sum(len(s.token_ids) for b in self.branches for s in b.segments if s.sampled)


class MissingLogprobs(ValueError):
    """A sampled segment without usable serving-time logprobs: the session cannot be trained off-policy-correctly."""


def check_logprobs(session: SessionRecord) -> None:
    """Raise `MissingLogprobs` unless every sampled segment carries one finite, non-positive logprob per token."""
    for b, branch in enumerate(session.branches):
        for s, segment in enumerate(branch.segments):
            where = f"branches[{b}].segments[{s}]"
            if not segment.sampled:
                if segment.logprobs is not None:
                    raise ValueError(f"{where}: logprobs on a context segment (sampled = false); drop them")
                continue
            if segment.logprobs is None:
                raise MissingLogprobs(
                    f"{where}: a sampled segment has no logprobs; the serving engine must return "
                    "them (vLLM `logprobs=0`)"
                )
            if len(segment.logprobs) != len(segment.token_ids):
                raise MissingLogprobs(
                    f"{where}: {len(segment.logprobs)} logprobs for {len(segment.token_ids)} sampled tokens"
                )
            if segment.logprobs and max(segment.logprobs) <= 0.0 and math.isfinite(sum(segment.logprobs)):
                continue  # every one finite and <= 0 (a NaN or an infinity makes the sum not finite)
            bad = [x for x in segment.logprobs if not (math.isfinite(x) and x <= 0.0)]
            if bad:
                raise MissingLogprobs(f"{where}: logprob {bad[0]!r} is not a finite number <= 0")
    if session.sampled_tokens() == 0:
        raise MissingLogprobs("no sampled segment: nothing the policy produced to train on")


class EditSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["edit"] = "edit"
    kept: bool
    """Whether the user's files still held the session's edit when checked."""
    after_s: float = Field(ge=0)
    """Seconds after the session's end when it was checked (edit persistence)."""


class TestsSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["tests"] = "tests"
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)


class ThumbsSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["thumbs"] = "thumbs"
    up: bool


class UndoSignal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["undo"] = "undo"
    """A follow-up turn asked to undo or redo the session's change."""


Signal = Annotated[EditSignal | TestsSignal | ThumbsSignal | UndoSignal, Field(discriminator="type")]


class SignalRecord(BaseModel):
    """One outcome signal about a session, observed later."""

    model_config = ConfigDict(extra="forbid")

    schema_: Literal["composer-session"] = Field(SCHEMA, alias="schema")
    version: int
    kind: Literal["signal"] = "signal"
    session_id: str = Field(min_length=1, max_length=200)
    at: float
    """Unix seconds when the signal was observed (product clock)."""
    signal: Signal


Record = Annotated[SessionRecord | SignalRecord, Field(discriminator="kind")]
_RECORD = TypeAdapter(Record)


class MalformedRecord(ValueError):
    """A spool line that is not a version-1 record; the message names the field and what is wrong."""


def parse_record(line: str | bytes) -> SessionRecord | SignalRecord:
    """One spool line -> a record; raises `MalformedRecord` naming the problem. A well-formed line is parsed and
    validated in one pass (pydantic's JSON parser); a bad one is read again to say what is wrong with it."""
    try:
        record = _RECORD.validate_json(line)
    except ValidationError:
        pass
    else:
        if record.schema_ == SCHEMA and record.version == VERSION:
            return record
    try:
        raw = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MalformedRecord(f"not JSON ({err})") from None
    if not isinstance(raw, dict):
        raise MalformedRecord(f"a record is a JSON object, got {type(raw).__name__}")
    if raw.get("schema") != SCHEMA:
        raise MalformedRecord(f"schema = {raw.get('schema')!r}; a session-log record has schema = {SCHEMA!r}")
    if raw.get("version") != VERSION:
        raise MalformedRecord(
            f"version = {raw.get('version')!r}; this reader reads version {VERSION} (upgrade "
            "composer-prime to read newer logs)"
        )
    try:
        return _RECORD.validate_python(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise MalformedRecord(f"{where}: {first['msg']} (got {str(first.get('input'))[:80]!r})") from None


def dump_record(record: SessionRecord | SignalRecord) -> str:
    """The record as one spool line (no trailing newline)."""
    return record.model_dump_json(by_alias=True, exclude_none=True)
