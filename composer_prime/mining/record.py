"""The mined task row: one JSON object per line of `tasks.jsonl`, written by the miner, read by `feature_deletion`.

A row names the repository state it was mined from (`base`: a tarball beside the tasks file, written once per
state and shared by every row of it) and holds what differs for its task: the deletion's line edits, the held-out test
files, the paths of the test files to restore before grading, the test ids and the gold patch. The taskset reads the state when
it loads the file, so task data still reaches env-server workers by value. `load_rows` validates each row on its own so that one bad row is reported, naming the row and the field,
and the rest still load.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from composer_prime.grading.behaviour import RecordedCall

FeatureKind = Literal["function", "method", "class", "module"]


class FeatureSpec(BaseModel):
    """Which feature a task deleted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FeatureKind
    """`function` (top level), `method`, `class` or `module` (a whole file)."""
    path: str = Field(min_length=1)
    """Repository-relative path of the source file that held it."""
    qualname: str
    """Dotted name inside the file (`Cart.total`); empty for a whole module."""
    deletion: Literal["whole", "stub"] = "whole"
    """`whole`: the definition and every import of it were removed; `stub`: the name stayed, its body raises
    `NotImplementedError` (`composer_prime.mining.stub`)."""


class MinedTask(BaseModel):
    """One Feature Deletion task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field(min_length=1)
    """Stable id `<repo>:<path>::<qualname>`; a re-run of the miner skips ids already in the file."""
    repo: str = Field(min_length=1)
    """Name of the mined repository (its folder name)."""
    repo_fingerprint: str = Field(min_length=1)
    """Hash of the mined files at baseline; a resume against a changed repository is refused."""
    feature: FeatureSpec
    """What was deleted."""
    prompt: str = Field(min_length=1)
    """The task statement shown to the agent: names, signatures, docstrings and call sites, no implementation."""
    base: str = Field(min_length=1, pattern=r"^[^/\\]+\.tar\.gz$")
    """File name, in the tasks file's folder, of the scrubbed repository state (`snapshot.pack_tree`) the task was
    mined from; the agent starts from it minus `held_out`, with `changes` applied, as a one-commit git repository."""
    changes: dict[str, list[tuple[int, int, list[str]]] | None] = Field(min_length=1)
    """Per file the deletion changed, the line edits (first line, last line, replacement lines; 1-based, inclusive)
    that turn the base text into the task's; None for a deleted file."""
    test_files: list[str]
    """Test files, `conftest.py` files and pytest configuration, restored from `base` before grading."""
    held_out: list[str]
    """The paths in `test_files` left out of the snapshot; they reach the box only at grading."""
    fail_to_pass: list[str] = Field(min_length=1)
    """Test ids that fail after the deletion and must pass again."""
    pass_to_pass: list[str] = Field(min_length=1)
    """Test ids that pass with and without the feature and must keep passing."""
    baseline_outcomes: dict[str, str] = Field(default_factory=dict)
    """FAIL_TO_PASS / PASS_TO_PASS tests whose outcome with the feature was not PASSED (`XFAIL`): grading accepts
    that outcome for them, and only PASSED for every other test."""
    behaviour: list[RecordedCall] = []
    """Calls into the feature the covering tests made with the gold code, with its answers (tagged values), kept only
    where a replay on the gold code answers the same; grading replays them against the candidate."""
    behaviour_skipped: int = Field(0, ge=0)
    """Calls seen but not kept: values without a strict form, or answers a lone replay does not reproduce."""
    pass_to_pass_behaviour: list[RecordedCall] = []
    """Calls the PASS_TO_PASS tests made into the source files with the gold code, with its answers, kept where the
    task's starting tree answers them alike (`composer_prime.mining.regression`): grading replays them beside
    `behaviour`, so a regression in another file shows outside the test process."""
    gold_patch: str = Field(min_length=1)
    """A `git apply` patch from the snapshot back to the original code."""
    test_cmd: list[str] = Field(min_length=1)
    """The pytest launcher, e.g. `["python", "-m", "pytest"]`; grading appends its own arguments."""
    test_timeout_s: float = Field(gt=0)
    """Wall-clock limit for one run of the suite, in seconds."""
    why: str = ""
    """Why the miner kept it: public or private, documented or not, covering tests, body size."""
    image: str | None = Field(None, min_length=1)
    """Environment image the task was mined and validated in (its Python and pinned test dependencies, never the
    package's own code): on an image runtime the feature-deletion taskset runs the task in it, as swe-gym runs each
    instance in its own image. None (a repository mined on the host) runs in the runtime's configured image."""

    @model_validator(mode="after")
    def _paths_stay_in_the_work_directory(self) -> MinedTask:
        for path in [self.feature.path, *self.test_files, *self.held_out, *self.changes]:
            parts = PurePosixPath(path).parts
            if not parts or path.startswith("/") or ".." in parts or "\\" in path:
                raise ValueError(
                    f"path {path!r} is not a relative path inside the repository; every path in a task is written "
                    "relative to the rollout's work directory (re-mine the task)"
                )
        return self

    @model_validator(mode="after")
    def _held_out_are_test_files(self) -> MinedTask:
        missing = [path for path in self.held_out if path not in self.test_files]
        if missing:
            raise ValueError(
                f"held_out names {missing} which are not keys of test_files; every held-out file must be stored "
                "in test_files so grading can restore it (re-mine the task)"
            )
        return self


def describe_error(row: int, error: ValidationError, task_id: object = None) -> str:
    """One line per problem: the row number (1-based), the field path, the bad value and what pydantic expected."""
    where = f"row {row}" + (f" (task_id {task_id!r})" if isinstance(task_id, str) else "")
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "<row>"
        value = item.get("input")
        shown = repr(value) if not isinstance(value, (dict, list)) or len(repr(value)) < 80 else type(value).__name__
        if item["type"] == "missing":
            parts.append(f"{where}: field {field!r} is missing")
        else:
            parts.append(f"{where}: field {field!r} = {shown[:80]}: {item['msg']}")
    return "\n".join(parts)


def parse_row(text: str, row: int, what: str = "") -> tuple[MinedTask | None, list[str]]:
    """One untrusted JSON row -> (the task, []) or (None, one message per problem, naming the row and the field).
    `what` names where the JSON sits when it is a field of a larger row (`field 'task' is`)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [f"row {row}: {what or ''}{' ' if what else ''}not valid JSON ({exc.msg} at column {exc.colno})"]
    if not isinstance(data, dict):
        return None, [f"row {row}: expected a JSON object, got {type(data).__name__}"]
    try:
        return MinedTask.model_validate(data), []
    except ValidationError as exc:
        return None, describe_error(row, exc, data.get("task_id")).split("\n")


def load_rows(path: Path) -> tuple[list[MinedTask], list[str]]:
    """Parse a tasks file; return the valid rows and one error message per bad row (the file is not trusted)."""
    tasks: list[MinedTask] = []
    errors: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for row, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            task, problems = parse_row(line, row)
            if task is None:
                errors.append("\n".join(problems))
            else:
                tasks.append(task)
    return tasks, errors
