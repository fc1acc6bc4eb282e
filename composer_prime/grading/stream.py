"""The outcome stream of a graded pytest run, read on the host: never trusted, never able to crash the reader.

The recorder in `bootstrap.py` writes lines `<nonce> <json>` down a private duplicate of the run's stdout: once
collection is done, the ids it collected (`{"collected": [...]}`); then, as each test finishes, one line holding
every report pytest made for it, counted by kind (`{"id", "reports": [{"when", "outcome", "xfail", "sub", "n"}]}`);
one line per failed collection (`{"id", "when": "collect", ...}`); and at the end of the session `{"exit": n}`.
The nonce reaches the launcher in its spec file, which the launcher deletes before it imports pytest, so the code
under test cannot read it from a file, its argv or its environment; it lives on only in the recorder's memory.

`read_stream` judges the stream as a whole. Every line that carries the nonce is parsed into one of the models below
(a wrong shape, a line over `MAX_LINE` characters, JSON nested too deeply or not JSON at all voids with a reason; no
input raises). Nothing written can be taken back: a test recorded twice, a phase (setup, call, teardown) reported
twice outside `subTest` blocks, or any record after the session's end voids. And a stream that ends before every
collected test reported (its writer silenced, the process killed) voids: a forger that pre-empts the recorder with
passes for the tests still to run, then closes or redirects its descriptor, has to have known every id collected.
The stream reaches the host through the launcher's capping stage (`launch.CAP`): a stream over its cap arrives with
its middle dropped and voids (`launch.overflow`), so no test's record is judged from a cut stream.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from composer_prime.grading.launch import overflow

MAX_LINE = 64_000_000
"""A stream line longer than this (characters) voids without being parsed."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Report(_Strict):
    when: Literal["setup", "call", "teardown"]
    outcome: Literal["passed", "failed", "skipped"]
    xfail: bool
    sub: bool
    """A `subTest` block's report (it may only add a failure to its test)."""
    n: int = Field(ge=1)
    """How many reports of this kind."""


class TestLine(_Strict):
    __test__ = False
    id: str = Field(min_length=1)
    reports: list[Report]


class CollectLine(_Strict):
    id: str
    when: Literal["collect"]
    outcome: Literal["failed"]
    xfail: bool


class CollectedLine(_Strict):
    collected: list[str]


class ExitLine(_Strict):
    exit: int


_KINDS: tuple[type[_Strict], ...] = (TestLine, CollectLine, CollectedLine, ExitLine)


def parse_line(text: str) -> _Strict | str:
    """One line's record (without the nonce), or why it is not one of the recorder's."""
    if len(text) > MAX_LINE:
        return f"a record of {len(text)} characters in the outcome stream (over {MAX_LINE})"
    try:
        data = json.loads(text)
    except RecursionError:
        return "a record nested too deeply in the outcome stream"
    except ValueError:
        return "a malformed record in the outcome stream (not JSON)"
    if not isinstance(data, dict):
        return "a malformed record in the outcome stream (not an object)"
    keys = set(data)
    for kind in _KINDS:
        if keys == set(kind.model_fields) or (kind is TestLine and keys == {"id", "reports"}):
            try:
                return kind.model_validate(data)
            except (ValidationError, RecursionError, TypeError, ValueError):
                return f"a malformed {kind.__name__} in the outcome stream"
    return f"a malformed record in the outcome stream (keys {sorted(keys)[:5]})"[:200]


def read_stream(stdout: str, nonce: str) -> tuple[list[dict], list[str], str]:
    """The recorder's report records from the run's stdout, flattened to one record per kind of report
    (`{"id", "when", "outcome", "xfail"}`, a failed collection's as it came, `{"exit": n}` last); the stream's void
    reasons (see the module docstring); and the other lines of stdout."""
    records: list[dict] = []
    void: list[str] = []
    rest: list[str] = []
    seen: set[str] = set()
    collected: list[str] | None = None
    ended = False
    for line in stdout.split("\n"):
        if not line.startswith(nonce + " "):
            rest.append(line)
            continue
        record = parse_line(line[len(nonce) + 1 :])
        if isinstance(record, str):
            void.append(record)
            continue
        if ended:
            void.append("records after the end of the session in the outcome stream")
        if isinstance(record, ExitLine):
            ended = True
            records.append({"exit": record.exit})
        elif isinstance(record, CollectedLine):
            if collected is not None:
                void.append("the collected tests announced twice in the outcome stream")
            collected = list(record.collected)
        elif isinstance(record, CollectLine):
            key = f"collect {record.id}"
            if key in seen:
                void.append(f"{record.id} (collect) recorded twice in the outcome stream")
            seen.add(key)
            records.append({"id": record.id, "when": "collect", "outcome": "failed", "xfail": False})
        elif isinstance(record, TestLine):
            if record.id in seen:
                void.append(f"{record.id} (test) recorded twice in the outcome stream")
            seen.add(record.id)
            records += _test_reports(record, void)
    if ended:
        missing = [test for test in collected or [] if test not in seen]
        if collected is None:
            void.append("the outcome stream never announced the collected tests")
        elif missing:
            void.append(
                f"the outcome stream ended before {len(missing)} collected test(s) reported (its writer went away): "
                + ", ".join(missing[:3])
            )
    void += overflow(stdout, "the outcome stream")
    return records, list(dict.fromkeys(void)), "\n".join(rest)


def _test_reports(record: TestLine, void: list[str]) -> list[dict]:
    """One test's line as one flat record per kind of report; a phase reported more than once outside `subTest`
    blocks voids (a `subTest` block may only add a failure to its test)."""
    plain: dict[str, int] = {}
    flat = []
    for entry in record.reports:
        if not entry.sub:
            plain[entry.when] = plain.get(entry.when, 0) + entry.n
        flat.append({"id": record.id, "when": entry.when, "outcome": entry.outcome, "xfail": entry.xfail})
    void += [f"{record.id} ({when}) reported twice in the outcome stream" for when, n in plain.items() if n != 1]
    return flat
