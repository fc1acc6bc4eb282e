"""A child process as a group: run in a session of its own, stopped as a group within seconds.

Everything the smoke and the realtime CPU demo run (pip, the input preparation, the teachers, PRIME-RL's `rl` with the
inference server, env server, orchestrator and torchrun trainer it starts) is a child process in a new session
(`children.spawn`, which also has the kernel send it SIGTERM if the parent itself is killed), so the parent only
waits and polls: Ctrl-C reaches it at once, and `children.stop_group` sends the child SIGTERM, then its process group
and every process below it SIGKILL after `GRACE_S`, which ends vLLM's engine core, torchrun's ranks and sandbox
keepers (PRIME-RL's launcher alone waits up to 60 s per process on SIGTERM).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from composer_prime.process.children import spawn, stop_group

GRACE_S = 1.0
"""Seconds a stopped process group gets between SIGTERM and SIGKILL."""


class ProcessFailed(RuntimeError):
    """A child process ended with a non-zero status; the message names it and its log."""


@contextmanager
def group(
    argv: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None, stdout_pipe: bool = False
) -> Iterator[subprocess.Popen]:
    """`argv` as the leader of a new session, its output appended to `log` (or piped); stopped on the way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        process = spawn(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE if stdout_pipe else sink,
            stderr=sink,
            stdin=subprocess.DEVNULL,
            text=stdout_pipe,
        )
        try:
            yield process
        finally:
            stop_group(process, GRACE_S)


def run(
    argv: list[str],
    log: Path,
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 3600.0,
    on_json: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run `argv` to its end; returns the JSON lines it printed (each also passed to `on_json`). Raises
    `ProcessFailed` naming `what` and `log` on a non-zero exit or after `timeout_s`."""
    lines: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with group(argv, log, cwd, env, stdout_pipe=True) as process:
        assert process.stdout is not None
        for raw in process.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                with log.open("a") as sink:
                    sink.write(raw)
                continue
            if isinstance(line, dict):
                lines.append(line)
                if on_json is not None:
                    on_json(line)
            if time.monotonic() > deadline:
                break
        remaining = max(0.0, deadline - time.monotonic())
        try:
            code = process.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            raise ProcessFailed(f"{what} did not finish in {timeout_s:.0f} s; see {log}") from None
    if code != 0:
        tail = "".join(f"\n  {line}" for line in log.read_text(errors="replace").splitlines()[-12:])
        raise ProcessFailed(f"{what} failed (exit code {code}); the end of {log}:{tail}")
    return lines
