"""What the grader needs from the rollout's runtime before it grades: no process of the rollout left, and a word
in the log when the runtime cannot keep the box clean.

`isolate_box` runs at setup: it gives the box a reaper token in the runtime's environment, so every command the
rollout runs carries `COMPOSER_BOX=<token>`, and opens the rollout's PID namespace (`composer_prime.process.pidns`), naming
its holder in the runtime's environment (`COMPOSER_PIDNS`) for the agent's workspace to run every command in it.
`end_rollout` runs before grading: it kills the namespace whole (every process the agent started, whatever tags it
shed), then `reap` kills every other process of the box (`composer_prime.process.reaper`: by that tag, the rlimit tag of
harnesses that use `box_argv`, a working directory inside the box, or ancestry). A process that outlived the agent
could otherwise rewrite the tree while the tests run (re-create a `conftest.py` the grader just removed). Where no
namespace could be opened (no CAP_SYS_ADMIN, no `unshare`), a docker or podman box's own PID namespace serves instead
(`pidns.open_container`: everything in it but its PID 1 is the rollout's, killed before grading); elsewhere the
reaper alone runs and the grade records why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf

from composer_prime.process.jail import program
from composer_prime.process.pidns import (
    CONTAINER_RUNTIMES,
    JAIL_VAR,
    NS_VAR,
    Namespace,
    NamespaceError,
    close_container,
    close_namespace,
    enter_argv,
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


async def isolate_box(
    runtime: vf.Runtime, namespace: bool = True, hidden: Iterable[str] = (), network: bool = False
) -> None:
    """Tag the box (`tag_box`) and, with `namespace`, open the rollout's PID namespace; a refusal is logged once and
    recorded for the grade. On the subprocess runtime the namespace is also a jail (`composer_prime.process.jail`: the host
    read-only but for the box, `hidden` covered, no capability); with `network`, it has a network namespace of its
    own (loopback only), so the agent's commands reach no network."""
    tag_box(runtime)
    if runtime in _namespaces:
        return
    host = type(runtime).__name__ == "SubprocessRuntime"
    if not namespace:
        opened: Namespace | str = "the taskset's isolate_processes is false"
    else:
        opened = await open_namespace(runtime, jail=host, hidden=tuple(hidden), network=network)
        if host and not isinstance(opened, Namespace):
            jail_refused = opened
            opened = await open_namespace(runtime, network=network)
            if isinstance(opened, Namespace):
                logger.warning("grading: the rollout's namespace is not a jail (%s)", jail_refused)
    if namespace and not isinstance(opened, Namespace):
        container = await open_container(runtime)
        opened = container if isinstance(container, Namespace) else f"{opened}; {container}"
    _namespaces[runtime] = opened
    if isinstance(opened, Namespace):
        if not opened.container:  # the agent's commands enter it; a container's commands are in it already
            runtime.env = {**runtime.env, NS_VAR: opened.holder}
        if opened.jail:
            runtime.env = {**runtime.env, JAIL_VAR: opened.jail}
    elif namespace and opened not in _warned:
        _warned.add(opened)
        logger.warning("grading: no PID namespace for the rollout (%s); only the reaper ends its processes", opened)


def jailed(runtime: vf.Runtime) -> bool:
    """Whether the rollout's commands run in a jail (`isolate_box` on the subprocess runtime, as root)."""
    opened = _namespaces.get(_unwrapped(runtime))
    return isinstance(opened, Namespace) and opened.jail is not None


_READABLE = r"""
for p; do
  if [ -d "$p" ]; then ls -A -- "$p" 2>/dev/null | grep -q . && echo "$p"
  elif [ -s "$p" ] && head -c 1 -- "$p" >/dev/null 2>&1; then echo "$p"; fi
done
echo composer-readable-done
"""


async def readable_by_agent(runtime: vf.Runtime, paths: Iterable[str]) -> list[str]:
    """The `paths` (host paths of the task's expected side) a command of the agent's can read, tried as the agent's
    workspace runs it (through the namespace and the jail, when there are ones)."""
    paths = [str(p) for p in paths]
    if not paths:
        return []
    if type(runtime).__name__ != "SubprocessRuntime":
        return []  # a container box holds none of the host's files: the expected side stays on the host
    argv = ["bash", "-c", _READABLE, "composer-readable", *paths]
    opened = _namespaces.get(runtime)
    if isinstance(opened, Namespace) and not opened.container:
        argv = enter_argv(argv, opened.holder, opened.jail)
    result = await runtime.run(argv, {})
    seen = (result.stdout or "").splitlines()
    if "composer-readable-done" not in seen:  # the check itself did not run to its end: assume the worst
        return paths
    return [p for p in paths if p in seen]


def run_folders(argv: list[str] | None = None) -> list[Path]:
    """The PRIME-RL run folder this process serves as an env server, read from its command line: PRIME-RL 559b447's
    launcher starts `env-server @ <run>/configs/envs/<split>/<name>.json` (`entrypoints/rl.py`). The run folder holds
    every rollout written so far (`rollouts/`, each trace with what grading reported: failing held-out tests'
    output, replay mismatches) and the orchestrator's logs, where a later rollout of the same task could read them:
    it is part of the expected side. Empty for any other process (tests, `composer-prime` commands): name the folder
    in `hidden_paths` where the env server is started another way."""
    args = sys.argv if argv is None else argv
    found = []
    for before, arg in zip(args, args[1:], strict=False):
        path = Path(arg)
        if (
            before == "@"
            and path.suffix == ".json"
            and len(path.parts) >= 5
            and path.parts[-4:-2] == ("configs", "envs")
        ):
            found.append(path.resolve().parents[3])
    return found


def git_dirs(path: Path) -> list[Path]:
    """The `.git` of every work tree holding `path` (a tasks file committed to a repository is in its objects too,
    which `git show` reads back whatever covers the file itself); for a linked work tree, whose `.git` is a file
    naming its git dir, the repository's common folder too (the objects are there)."""
    found: list[Path] = []
    for parent in Path(path).resolve().parents:
        dot_git = parent / ".git"
        if dot_git.is_file():
            text = dot_git.read_text("utf-8", "replace").strip()
            if text.startswith("gitdir:"):
                linked = (parent / text.removeprefix("gitdir:").strip()).resolve()
                common = linked / "commondir"
                found.append((linked / common.read_text().strip()).resolve() if common.is_file() else linked)
        if dot_git.exists():
            found.append(dot_git)
    return found


async def refuse_unless_hidden(runtime: vf.Runtime, taskset: str, paths: Iterable[str], allow: bool) -> bool:
    """Check, at setup, that the agent cannot read the task's expected side (`paths`); True when it cannot. Where it
    can, raise `vf.SandboxError` naming the fix, unless `allow` (the taskset's `expected_side = "readable"`)."""
    readable = await readable_by_agent(runtime, paths)
    if not readable:
        return True
    if allow:
        warn_on_subprocess(runtime, f"{taskset}: the agent can read the task's expected side ({readable[0]})")
        return False
    why = "the rollout is not jailed" if not jailed(runtime) else "the jail does not cover it"
    raise vf.SandboxError(
        f"{taskset}: the agent could read the task's expected side ({', '.join(readable[:3])}): {why}. Train on the "
        "docker or podman runtime, or on the subprocess runtime as root with isolate_processes = true (the rollout "
        'then runs in a jail that hides it), or set expected_side = "readable" (tests, evaluation; metric '
        "expected_side_hidden = 0)"
    )


TOOLS = frozenset(
    "sh bash dash env timeout unshare nsenter setpriv setsid kill ps sleep true false test pwd cd ls cat head tail "
    "cp mv rm mkdir rmdir ln touch chmod chown stat find xargs sort uniq wc cut tr sed awk grep readlink realpath "
    "dirname basename mktemp tee dd base64 sha256sum md5sum tar gzip date id printf echo".split()
)
"""The programs grading's own commands and scripts run (the interpreter aside)."""


class HostTools:
    """`runtime` as grading uses it on the subprocess runtime, where a box's `PATH` may lead first to a folder the
    agent wrote (a shared venv's `bin`): a program grading names (`sh`, `rm`, `timeout`, ...) is run by its host path
    (`composer_prime.process.jail.SYSTEM_PATH`), and every command's `PATH` starts with a fresh folder of links to the host's
    `TOOLS`, so the scripts' own `find`, `kill` or `sha256sum` are the host's too; the rest of `PATH` is the box's, so
    the interpreter is the one its task names (which the jail kept read-only for the agent and the interpreter check
    hashes). `close` removes the folder."""

    def __init__(self, runtime: vf.Runtime):
        self.runtime = runtime
        self.toolbox = tempfile.mkdtemp(prefix="composer-prime-tools-")
        for name in sorted(TOOLS):
            found = program(name)
            if found.startswith("/"):
                os.symlink(found, os.path.join(self.toolbox, name))

    def __getattr__(self, name: str):
        return getattr(self.runtime, name)

    async def run(self, argv: list[str], env: dict[str, str]) -> vf.ProgramResult:
        if argv and argv[0] in TOOLS:
            argv = [program(argv[0]), *argv[1:]]
        outside = env.get("PATH") or (getattr(self.runtime, "env", None) or {}).get("PATH") or os.environ["PATH"]
        return await self.runtime.run(argv, {**env, "PATH": f"{self.toolbox}:{outside}"})

    def close(self) -> None:
        shutil.rmtree(self.toolbox, ignore_errors=True)


def _unwrapped(runtime: vf.Runtime) -> vf.Runtime:
    while isinstance(runtime, HostTools):
        runtime = runtime.runtime
    return runtime


@contextlib.contextmanager
def host_tools(runtime: vf.Runtime) -> Iterator[vf.Runtime]:
    """`runtime` as the host's own steps (a taskset's setup, grading) run it: wrapped in `HostTools` on the subprocess
    runtime, its folder of links removed after; as it is elsewhere (a container's programs are its image's, and the
    grader box holds there). A program an earlier rollout planted on a shared `PATH` runs at no step of the host's."""
    if type(runtime).__name__ != "SubprocessRuntime":
        yield runtime
        return
    wrapped = HostTools(runtime)
    try:
        yield wrapped  # type: ignore[misc]
    finally:
        wrapped.close()


async def end_rollout(runtime: vf.Runtime) -> Ended:
    """Kill the rollout's PID namespace whole, then reap the box (but a container's, where every process but its PID 1
    was killed with the namespace); how it was done. Survivors fail the grading."""
    opened = _namespaces.get(_unwrapped(runtime), "no namespace was opened at setup (isolate_box)")
    killed = 0
    if isinstance(opened, Namespace):
        try:
            close = close_container if opened.container else close_namespace
            killed = await close(runtime, opened)
        except NamespaceError as exc:
            raise vf.SandboxError(f"grading: {exc}") from exc
    if not (isinstance(opened, Namespace) and opened.container):  # a container's: nothing but its PID 1 is left
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
