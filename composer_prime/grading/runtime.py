"""What the grader needs from the rollout's runtime before it grades: no process of the rollout left, and a word
in the log when the runtime cannot keep the box clean.

`isolate_box` runs at setup: it gives the box a reaper token in the runtime's environment, so every command the
rollout runs carries `COMPOSER_BOX=<token>`, and opens the rollout's PID namespace (`composer_prime.pidns`), naming
its holder in the runtime's environment (`COMPOSER_PIDNS`) for the agent's workspace to run every command in it.
`end_rollout` runs before grading: it kills the namespace whole (every process the agent started, whatever tags it
shed), then `reap` kills every other process of the box (`composer_prime.reaper`: by that tag, the rlimit tag of
harnesses that use `box_argv`, a working directory inside the box, or ancestry). A process that outlived the agent
could otherwise rewrite the tree while the tests run (re-create a `conftest.py` the grader just removed). Where no
namespace could be opened (no CAP_SYS_ADMIN, no `unshare`), a docker or podman box's own PID namespace serves instead
(`pidns.open_container`: everything in it but its PID 1 is the rollout's, killed before grading); elsewhere the
reaper alone runs and the grade records why.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import verifiers.v1 as vf

from composer_prime.process.pidns import (
    CONTAINER_RUNTIMES,
    NS_VAR,
    Namespace,
    NamespaceError,
    close_container,
    close_namespace,
    open_container,
    open_namespace,
)
from composer_prime.process.reaper import BOX_VAR, ReapError, new_token, reap_box

logger = logging.getLogger(__name__)
_warned: set[str] = set()
_namespaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Runtime -> its `Namespace`, or why it has none; held in the env server's memory, not the box."""


@dataclass(frozen=True)
class Ended:
    """How the rollout's processes were ended before grading."""

    isolation: str
    """`pid-namespace` (the agent's commands ran in a PID namespace, killed whole), `container` (the box's container
    is that namespace: all but its PID 1 killed) or `reaper` (tags only)."""
    note: str | None
    """Why the namespace was not used, when it was not."""
    killed: int
    """Processes killed (namespace members and reaped ones)."""


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


async def isolate_box(runtime: vf.Runtime, namespace: bool = True) -> None:
    """Tag the box (`tag_box`) and, with `namespace`, open the rollout's PID namespace; a refusal is logged once and
    recorded for the grade."""
    tag_box(runtime)
    if runtime in _namespaces:
        return
    opened = await open_namespace(runtime) if namespace else "the taskset's isolate_processes is false"
    if namespace and not isinstance(opened, Namespace):
        container = await open_container(runtime)
        opened = container if isinstance(container, Namespace) else f"{opened}; {container}"
    _namespaces[runtime] = opened
    if isinstance(opened, Namespace):
        if not opened.container:  # the agent's commands enter it; a container's commands are in it already
            runtime.env = {**runtime.env, NS_VAR: opened.holder}
    elif namespace and opened not in _warned:
        _warned.add(opened)
        logger.warning("grading: no PID namespace for the rollout (%s); only the reaper ends its processes", opened)


async def end_rollout(runtime: vf.Runtime) -> Ended:
    """Kill the rollout's PID namespace whole, then reap the box; how it was done. Survivors fail the grading."""
    opened = _namespaces.get(runtime, "no namespace was opened at setup (isolate_box)")
    killed = 0
    if isinstance(opened, Namespace):
        try:
            close = close_container if opened.container else close_namespace
            killed = await close(runtime, opened)
        except NamespaceError as exc:
            raise vf.SandboxError(f"grading: {exc}") from exc
    killed += await reap(runtime)
    if isinstance(opened, Namespace):
        return Ended("container" if opened.container else "pid-namespace", None, killed)
    return Ended("reaper", opened, killed)


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


def refuse_without_grader_box(runtime: vf.Runtime, taskset: str, private_copy: bool) -> None:
    """Raise `vf.SandboxError` naming why, unless `runtime` grades in a grader box (a docker or podman box, graded
    as a private copy). Elsewhere grading runs the box's own tools (`sh`, `find`, `sha256sum`, `tar`, the
    interpreter), which the agent can replace: on the subprocess runtime the host's, writable with the worker's
    rights; in another runtime's box, the agent's. The tasksets call it at setup with `require_grader_box`."""
    kind = type(runtime).__name__
    if kind in CONTAINER_RUNTIMES and private_copy:
        return
    why = "isolate_processes is false" if kind in CONTAINER_RUNTIMES else f"the {kind} has no grader box"
    raise vf.SandboxError(
        f"{taskset}: require_grader_box = true refuses this rollout: {why}, so grading would run tools the agent "
        "could have replaced (a program of the agent's could run at grading, outside its killed namespace). Train "
        "on the docker or podman runtime with isolate_processes = true, or set require_grader_box = false (tests, "
        "evaluation)"
    )
