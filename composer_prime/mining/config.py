"""`composer-prime mine-features`'s settings (`MineConfig`), with no heavy import: `--help` and a bad flag answer at once,
before the miner (which imports the grader and verifiers) is loaded."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from composer_prime.mining.copies import NEAR_COPY
from composer_prime.mining.features import is_test_file
from composer_prime.mining.snapshot import list_paths


class MineConfig(BaseModel):
    """What `composer-prime mine-features` mines and how."""

    model_config = ConfigDict(extra="forbid")

    repo: Path
    """The repository to mine (a folder; a git work tree or not). It is only read."""
    out: Path
    """The tasks file (JSON lines) to write; an existing one is resumed."""
    max_tasks: int | None = Field(None, ge=1)
    """Stop after this many tasks in the file (resumed ones included); None mines every candidate."""
    min_tests: int = Field(1, ge=1)
    """Keep a task only if at least this many tests fail without the feature (FAIL_TO_PASS)."""
    test_cmd: list[str] = Field(default_factory=lambda: ["python", "-m", "pytest"], min_length=1)
    """The interpreter that runs the repository's tests, as `<python> -m pytest`: a list or one shell-quoted string
    (e.g. 'python3 -m pytest'). `python` and `python3` are the interpreter that runs composer-prime; name another by its
    path. Mining and grading run pytest through their own launcher with their own arguments, so other launchers
    (poetry run, tox) and pytest flags are refused."""
    near_copy: float = Field(NEAR_COPY, gt=0, le=1.01)
    """Refuse a candidate when a visible file holds this share of the deleted code's token shingles (above 1: never)."""
    host_copies: bool = True
    """Also search the Python files of this machine's site-packages named like the repository's packages for near
    copies (a rollout on the subprocess runtime could read them). mine-corpus turns it off: its tasks run in their
    own image, which it searches for the gold code instead (docs/feature-deletion.md, "Mining a corpus")."""
    min_body_lines: int = Field(3, ge=0)
    """Leave out functions and methods whose body (docstring aside) has fewer lines than this: too small to teach."""
    test_timeout_s: float | None = Field(None, gt=0)
    """Wall-clock limit for one run of the suite per candidate (and in the task), in seconds; a run past it is killed
    and the candidate skipped. None sizes it from the untraced baseline run: 4x its time, at least 60 s."""
    baseline_timeout_s: float = Field(1800.0, gt=0)
    """Wall-clock limit for the first, untraced baseline run, in seconds."""
    min_replayed_calls: int = Field(1, ge=0)
    """Keep a task only if at least this many calls into the feature were recorded and replay as recorded: grading
    replays them against the candidate outside the test suite's interpreter (0 keeps tasks graded by tests alone)."""

    deletion: Literal["whole", "stub", "auto"] = "auto"
    """How a feature is deleted. `whole`: its definition goes, and every import of it and `__all__` entry; `stub`:
    its name stays and its body raises `NotImplementedError` (a class keeps its methods as such stubs), so a test
    module that imports every public name still collects; `auto`: `whole`, and `stub` where the whole deletion
    cannot be made, stops pytest or leaves a test module uncollectable (docs/feature-deletion.md, "Deletion modes").
    A whole module is always deleted whole."""
    stub_docstring: bool = True
    """In a stub, keep the definition's docstring (the header is always kept)."""

    @field_validator("test_cmd", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str) and " " in value[0]:
            value = value[0]  # one quoted flag value on the command line
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as err:
                raise ValueError(f"{value!r} is not a valid shell command ({err}); balance its quotes") from None
        return value

    @field_validator("test_cmd")
    @classmethod
    def _pytest_launcher(cls, value: list[str]) -> list[str]:
        if len(value) != 3 or value[1:] != ["-m", "pytest"]:
            raise ValueError(
                f"{shlex.join(value)!r} is not `<python> -m pytest`: mining and grading run pytest through their own "
                "launcher with their own arguments, so other launchers (poetry run, tox) and pytest flags do not apply; "
                "pass the interpreter of the environment that has the tests' dependencies ('/path/to/venv/bin/python "
                "-m pytest'; for poetry, `poetry env info --executable` names it)"
            )
        return value


def check_inputs(config: MineConfig) -> None:
    """Refuse, before any work, a repository the miner cannot use and an --out or --test-cmd that cannot work.
    Raises ValueError naming the flag, the value and the fix."""
    repo = config.repo.expanduser()
    if not repo.is_dir():
        raise ValueError(f"--repo {config.repo}: no such directory; pass the root of a Python repository")
    files = list_paths(repo)
    if not files:
        raise ValueError(
            f"--repo {config.repo}: the folder is empty; pass the root of a Python repository with a pytest suite"
        )
    python = [path for path in files if path.endswith(".py")]
    if not python:
        raise ValueError(
            f"--repo {config.repo}: none of its {len(files)} file(s) is Python (*.py); mine-features "
            "mines Python repositories with a pytest suite"
        )
    if not any(is_test_file(path) for path in python):
        raise ValueError(
            f"--repo {config.repo}: no test files (test_*.py, *_test.py, tests.py, test*.py, *tests.py, tests/) "
            f"among its {len(python)} Python "
            "file(s); a task is graded by the tests that fail without its feature, so the repository needs a suite"
        )
    launcher = config.test_cmd[0]
    search = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])  # as `testrun` runs it
    if "/" not in launcher and shutil.which(launcher, path=search) is None:
        raise ValueError(
            f"--test-cmd {shlex.join(config.test_cmd)!r}: {launcher!r} is not on PATH; install it, name the interpreter "
            "by its path, or use the interpreter that runs composer-prime (--test-cmd 'python -m pytest')"
        )
    if "/" in launcher and not (repo / launcher).is_file() and not Path(launcher).is_file():
        raise ValueError(
            f"--test-cmd {shlex.join(config.test_cmd)!r}: {launcher!r} is neither a file of the repository "
            "nor of this machine"
        )
    out = config.out.expanduser()
    if out.is_dir():
        raise ValueError(
            f"--out {config.out}: a folder; --out is the tasks file to write (e.g. "
            f"{config.out / 'tasks.jsonl'}), its tarballs go beside it"
        )
    if out.parent.exists() and not out.parent.is_dir():
        raise ValueError(f"--out {config.out}: {out.parent} is a file, not a folder; pass a path in a writable folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".probe"):
            pass
        if out.exists() and not os.access(out, os.W_OK):
            raise PermissionError(13, "the file is read-only")
    except OSError as err:
        raise ValueError(
            f"--out {config.out}: cannot write there ({err.strerror or err}); pass a path in a writable folder"
        ) from None
