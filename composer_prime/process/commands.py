"""Host commands that must succeed: one run-and-raise helper (the box-side twin is `grading.runtime.run_checked`).

A failure raises the caller's error type with the command, where it ran and the tail of its output, so each
mechanism keeps its own exception (PrepError, SnapshotError) without its own copy of the subprocess handling.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

OUTPUT_TAIL_CHARS = 2000
"""How much of a failed command's output the error carries."""


def run_checked_host(
    argv: list[str],
    *,
    error: type[Exception],
    timeout_s: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> str:
    """Run `argv` on this host (`input` on its stdin) and return its stdout; a timeout, a missing program or a
    non-zero exit raises `error`."""
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            check=False,
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=timeout_s,
            input=input,
        )
    except subprocess.TimeoutExpired as exc:
        raise error(f"`{' '.join(argv)}` ran past {timeout_s:.0f}s (in {cwd})") from exc
    except FileNotFoundError as exc:
        raise error(f"`{argv[0]}` is not installed or not on PATH (needed for `{' '.join(argv)}`)") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-OUTPUT_TAIL_CHARS:]
        raise error(f"`{' '.join(argv)}` exited {done.returncode} (in {cwd}):\n{tail}")
    return done.stdout
