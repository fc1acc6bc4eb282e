"""SWE-bench grading semantics: which tests run and how the test patch reaches the box (pure functions and the
box-side script); the run itself is `composer_prime.grading`'s.

After the agent finishes, in its own box, once its processes are gone and `composer_prime.grading` has removed
its stray files and scanned its changes:

1. every test file of the starting tree and every file the `test_patch` touches is written from its content read
   before the agent ran (held in the env server's memory), with the `test_patch` applied on the host
   (`patched_tests`); a file the patch deletes is removed. The box's git is not run after the agent (its
   configuration is the agent's: a filter, a hook or a promisor remote would run with it);
2. edits the agent made to those files therefore do not count;
3. the test files it touches (and the files named by the FAIL_TO_PASS / PASS_TO_PASS ids; or exactly those ids,
   for repos configured so) run through the trusted launcher (`directives_for`);
4. the instance is resolved (reward `solved` 1.0) iff every FAIL_TO_PASS test passed and every PASS_TO_PASS test
   still passes, and the grade is neither void nor timed out. Only PASSED counts: a test that was skipped,
   xfailed, xpassed, errored, did not run or was not found is a failure (stricter than SWE-bench's
   `get_resolution_status`, https://github.com/SWE-bench/SWE-bench `harness/grading.py`, since the code under test
   can call `pytest.xfail()` or `pytest.skip()` itself).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from composer_prime.grading import tree
from composer_prime.grading.pytest_config import collected
from composer_prime.process.commands import run_checked_host

APPLY_FAILED = ">>>>> swe-gym: test_patch does not apply"

DIFF_HEADER_RE = re.compile(r"^diff --git a/(.+?) b/(.+)$")


def diff_paths(diff: str) -> list[str]:
    """Every path a unified git diff touches (both sides of a rename), in order of appearance."""
    paths: list[str] = []
    for line in diff.splitlines():
        match = DIFF_HEADER_RE.match(line)
        if match is None:
            continue
        for path in match.groups():
            if path not in paths:
                paths.append(path)
    return paths


def created_or_kept_paths(diff: str) -> list[str]:
    """The paths that exist after a diff is applied (its `b/` side, minus deleted files)."""
    paths: list[str] = []
    current: str | None = None
    for line in diff.splitlines():
        match = DIFF_HEADER_RE.match(line)
        if match is not None:
            current = match.group(2)
            if current not in paths:
                paths.append(current)
        elif line.startswith("deleted file mode") and current in paths:
            paths.remove(current)
    return paths


def file_of_test(test_id: str) -> str:
    """The file part of a pytest node id (`tests/test_a.py::T::test_x[1]` -> `tests/test_a.py`)."""
    return test_id.split("::", 1)[0]


def directives_for(
    test_patch: str, fail_to_pass: Iterable[str], pass_to_pass: Iterable[str], by_id: bool = False
) -> list[str]:
    """What the test command runs: the Python test files the test patch leaves in place, then any other file a listed
    id names; or, `by_id`, exactly the listed ids (for data-driven suites whose ids all name one huge file)."""
    if by_id:
        return list(dict.fromkeys((*fail_to_pass, *pass_to_pass)))
    files = [path for path in created_or_kept_paths(test_patch) if path.endswith(".py")]
    for test_id in (*fail_to_pass, *pass_to_pass):
        path = file_of_test(test_id)
        if path.endswith(".py") and path not in files:
            files.append(path)
    return files


class TestPatchError(Exception):
    """The test patch does not apply to the test files held from the box's starting tree."""

    __test__ = False


def patched_tests(
    held: dict[str, bytes], test_patch: str, timeout_s: float = 60.0
) -> tuple[dict[str, bytes], list[str]]:
    """Apply `test_patch` on the host to the files held from the box's starting tree: (every path the patch leaves,
    with its bytes; the paths it deletes). Nothing of the box is asked (its git may run the agent's filters)."""
    paths = diff_paths(test_patch)
    with tempfile.TemporaryDirectory(prefix="swe-gym-tests-") as scratch:
        root = Path(scratch)
        for path in paths:
            if path in held:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(held[path])
        (root / ".test.patch").write_text(test_patch, encoding="utf-8")
        safe = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": scratch}
        try:
            run_checked_host(
                ["git", "apply", "--whitespace=nowarn", ".test.patch"],
                error=TestPatchError,
                timeout_s=timeout_s,
                cwd=root,
                env=safe,
            )
        except TestPatchError as exc:
            raise TestPatchError(f"{APPLY_FAILED}: {exc}") from None
        kept = {path: (root / path).read_bytes() for path in paths if (root / path).is_file()}
    return kept, [path for path in paths if path not in kept]


def test_files(files: Iterable[str], tests: Iterable[str], row: Any, settings: Mapping[str, str]) -> set[str]:
    """The files of the starting tree the instance owns, written from the host-held bytes over the agent's at grading:
    the test patch's files (`tests`), and, outside the files the gold patch changes (where the fix goes), every file
    a FAIL_TO_PASS or PASS_TO_PASS id of `row` names, every file the repository's own collection rules collect
    (`settings`: `python_files`, `testpaths`; `calc/tests.py` under `python_files = tests.py`), every `conftest.py`
    and every file under a `tests`, `test` or `testing` folder."""
    patch_files = set(tests)
    named = {test.split("::", 1)[0] for test in [*row.fail_to_pass, *row.pass_to_pass]}
    fixed = set(diff_paths(row.patch))
    return {
        path
        for path in files
        if path in patch_files
        or (path not in fixed and (path in named or tree.is_test_path(path) or collected(settings, path)))
    }
