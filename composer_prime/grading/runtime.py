"""What the grader needs from the rollout's runtime before it grades: no process of the rollout left, and a word
in the log when the runtime cannot keep the box clean.

`tag_box` gives the box a reaper token at setup, in the runtime's environment, so every command the rollout runs
carries `COMPOSER_BOX=<token>`; `reap` kills, before grading, every process of the box (`composer_prime.reaper`:
by that tag, the rlimit tag of harnesses that use `box_argv`, a working directory inside the box, or ancestry),
including daemons that escaped with `setsid`/`nohup`. A process that outlived the agent could otherwise rewrite the
tree while the tests run (re-create a `conftest.py` the grader just removed).
"""

from __future__ import annotations

import logging

import verifiers.v1 as vf

from composer_prime.reaper import BOX_VAR, ReapError, new_token, reap_box

logger = logging.getLogger(__name__)
_warned: set[str] = set()


async def run_checked(runtime: vf.Runtime, argv: list[str], what: str) -> vf.ProgramResult:
    """Run a command in the box; a non-zero exit raises `vf.SandboxError` naming the step and the output's tail."""
    result = await runtime.run(argv, {})
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout or "").strip()[-500:]
        raise vf.SandboxError(f"{what} failed (exit {result.exit_code}): {detail}")
    return result


def tag_box(runtime: vf.Runtime) -> None:
    """Put a reaper token in the runtime's environment (once), so the rollout's processes carry it."""
    if BOX_VAR not in runtime.env:
        runtime.env = {**runtime.env, BOX_VAR: new_token()}


async def reap(runtime: vf.Runtime) -> int:
    """Kill every process the rollout started in `runtime`'s box; returns how many. Survivors fail the grading."""
    token = runtime.env.get(BOX_VAR) or new_token()
    result = await runtime.run(["pwd", "-P"], {})
    workdir = (result.stdout or "").strip()
    if result.exit_code != 0 or not workdir.startswith("/"):
        raise vf.SandboxError(f"grading: cannot read the box's work directory (exit {result.exit_code})")
    try:
        killed = await reap_box(runtime, workdir, token)
    except ReapError as exc:
        raise vf.SandboxError(f"grading: {exc}") from exc
    if killed:
        logger.info("grading: killed %d process(es) the rollout left in %s", killed, workdir)
    return killed


def warn_on_subprocess(runtime: vf.Runtime, message: str) -> None:
    """Log `message` once per process when `runtime` is the subprocess runtime (a host folder, not a sandbox)."""
    if type(runtime).__name__ == "SubprocessRuntime" and message not in _warned:
        _warned.add(message)
        logger.warning(message)
