"""SWE-Gym rows: the fields an instance carries, and their validation.

A row is one GitHub issue with its fix (SWE-Gym, Pan et al. 2024, https://arxiv.org/abs/2412.21139; the
field set is SWE-bench's). Rows come from the Hugging Face hub or a local JSONL/parquet file (`sources.py`);
both hand plain dicts to `parse_rows`, which validates each one on its own: a missing or wrong-typed field
is reported with the row's instance id and the rest of the batch loads.

On the hub, `FAIL_TO_PASS` / `PASS_TO_PASS` are JSON-encoded strings (`'["tests/test_a.py::test_x"]'`);
local files may hold real lists. Both are accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")

REQUIRED_STR = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "version")
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
OPTIONAL_STR = ("hints_text", "created_at")


class SWEGymRow(BaseModel):
    """One validated SWE-Gym instance."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    """`owner__name-<PR number>`, unique within the dataset."""
    repo: str
    """`owner/name` on GitHub."""
    base_commit: str
    """The 40-hex commit the issue is solved against; nothing after it may reach the agent."""
    problem_statement: str
    """The issue text, shown to the agent."""
    patch: str
    """The gold fix (non-test files), a unified git diff."""
    test_patch: str
    """The fix's tests, a unified git diff applied only at grading time."""
    version: str
    """The repository's release line (`"2.0"`); environments are prepared once per repo and version."""
    fail_to_pass: tuple[str, ...]
    """Test ids that fail at `base_commit` and pass with the gold patch."""
    pass_to_pass: tuple[str, ...]
    """Test ids that pass both before and after the gold patch."""
    hints_text: str = ""
    created_at: str = ""


@dataclass(frozen=True)
class RowError:
    """Why one row was refused; `instance_id` is None when the row has no readable id."""

    index: int
    instance_id: str | None
    field: str
    message: str

    def __str__(self) -> str:
        who = f"instance {self.instance_id!r}" if self.instance_id else f"row {self.index} (no instance_id)"
        return f"{who}: field {self.field!r}: {self.message}"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _parse_test_list(name: str, value: Any) -> tuple[list[str] | None, str | None]:
    """A test-id list from a list or a JSON-encoded list; (None, reason) when it is neither."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return None, f"is a string but not a JSON list ({exc.msg}); expected a list of test ids"
    if hasattr(value, "tolist") and not isinstance(value, list):  # numpy arrays from parquet readers
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        return None, f"has type {_type_name(value)}; expected a list of test ids (or its JSON encoding)"
    bad = [item for item in value if not isinstance(item, str) or not item]
    if bad:
        return None, f"holds {len(bad)} entries that are not non-empty strings (first: {bad[0]!r})"
    return list(value), None


def parse_row(index: int, raw: Mapping[str, Any]) -> tuple[SWEGymRow | None, list[RowError]]:
    """Validate one raw row; every problem is reported, not only the first."""
    raw_id = raw.get("instance_id")
    ident = raw_id if isinstance(raw_id, str) and raw_id else None
    errors: list[RowError] = []

    def err(field: str, message: str) -> None:
        errors.append(RowError(index, ident, field, message))

    values: dict[str, Any] = {}
    for name in REQUIRED_STR:
        value = raw.get(name)
        if value is None:
            err(name, "is missing")
        elif not isinstance(value, str):
            err(name, f"has type {_type_name(value)} (value {value!r:.60}); expected a string")
        elif not value.strip():
            err(name, "is empty")
        else:
            values[name] = value
    if "base_commit" in values and not SHA_RE.match(values["base_commit"]):
        err("base_commit", f"{values['base_commit']!r:.60} is not a full 40-hex lowercase commit sha")
    if "repo" in values and not REPO_RE.match(values["repo"]):
        err("repo", f"{values['repo']!r:.60} is not of the form 'owner/name'")
    for name in TEST_LISTS:
        if raw.get(name) is None:
            err(name, "is missing")
            continue
        tests, reason = _parse_test_list(name, raw[name])
        if reason is not None:
            err(name, reason)
        else:
            values[name.lower()] = tuple(tests)
    if values.get("fail_to_pass") == ():
        err("FAIL_TO_PASS", "is empty; an instance needs at least one test its fix makes pass")
    for name in OPTIONAL_STR:
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            err(name, f"has type {_type_name(value)}; expected a string")
        elif value is not None:
            values[name] = value
    if errors:
        return None, errors
    return SWEGymRow(**values), []


def parse_rows(raws: Iterable[Mapping[str, Any] | str]) -> tuple[list[SWEGymRow], list[RowError]]:
    """Validate every row; refused rows (and later duplicates of an instance id) go to the error list."""
    rows: list[SWEGymRow] = []
    errors: list[RowError] = []
    seen: set[str] = set()
    for index, raw in enumerate(raws):
        if isinstance(raw, str):  # a source's note about an unreadable record (e.g. a JSONL line)
            errors.append(RowError(index, None, "<row>", raw))
            continue
        if not isinstance(raw, Mapping):
            errors.append(RowError(index, None, "<row>", f"is a {_type_name(raw)}, not an object"))
            continue
        row, row_errors = parse_row(index, raw)
        errors.extend(row_errors)
        if row is None:
            continue
        if row.instance_id in seen:
            errors.append(RowError(index, row.instance_id, "instance_id", "repeats an earlier row; keeping the first"))
            continue
        seen.add(row.instance_id)
        rows.append(row)
    return rows, errors


def select_rows(
    rows: Iterable[SWEGymRow], repos: Iterable[str] | None = None, instance_ids: Iterable[str] | None = None
) -> tuple[list[SWEGymRow], list[str]]:
    """Rows whose repo and id pass the filters (None keeps all); also returns the requested ids not found."""
    repo_set = set(repos) if repos is not None else None
    id_set = set(instance_ids) if instance_ids is not None else None
    kept = [
        row
        for row in rows
        if (repo_set is None or row.repo in repo_set) and (id_set is None or row.instance_id in id_set)
    ]
    missing = sorted(id_set - {row.instance_id for row in kept}) if id_set is not None else []
    return kept, missing
