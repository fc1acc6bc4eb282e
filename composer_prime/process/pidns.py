"""The rollout's PID namespace: every command the agent runs lives in it, and killing its first process kills all.

The reaper (`reaper.py`) finds a rollout's processes by tags they carry; a process that sheds every tag
on purpose (`( ulimit -R 4; cd / && exec setsid env -i bash daemon.sh & )`: limit lowered, directory left, variable
dropped, orphaned) escapes it and can rewrite the tree while grading runs. A PID namespace has no such gap:

1. `open_namespace(runtime)` starts, through the runtime (so in the box), a holder:
   `unshare --pid --fork --kill-child --mount-proc bash -c <init loop>`. The holder is PID 1 of a fresh PID namespace
   with its own `/proc`; it reaps the orphans that reparent to it and exits (ending the namespace) once the box's
   work directory is gone, so a rollout that is never graded leaves nothing behind. Its PID as the box sees it and
   the namespace's inode (`/proc/<pid>/ns/pid`) are returned and kept on the host;
2. `enter_argv(argv, namespace)` wraps every command of the agent: `nsenter -t <holder> --pid --mount --wd=. -- argv`.
   The command and everything it starts (double forks, `setsid`, `env -i`, `cd /`) are in the namespace and see only
   its processes; a process cannot leave a PID namespace, and its members cannot signal its PID 1 (init ignores
   signals it has no handler for);
3. `close_namespace(runtime, namespace)` SIGKILLs the holder. When a namespace's PID 1 dies the kernel SIGKILLs every
   other member and the holder's exit completes only once they are gone; the script then checks that no process
   with the namespace's inode is left.

Creating a PID namespace needs CAP_SYS_ADMIN (root on the host, a privileged container). Where `unshare` is refused
or missing, `open_namespace` returns the reason instead. A container of the docker or podman runtime (which drop
CAP_SYS_ADMIN) is a PID namespace of its own already, holding nothing but the box: `open_container(runtime)` checks
that its PID 1 is the runtime's keep-alive (`sleep infinity`) and names the namespace, and `close_container` SIGKILLs
every other process in it (`kill -KILL -1`, repeated until none is left, so a forking process cannot outrun it) and
checks that none but PID 1 and the caller remains. Elsewhere the caller falls back to the reaper alone, recording why.
Not covered: processes started outside the box on the agent's behalf (cron, `systemd-run`, a docker socket), and an
agent with CAP_SYS_ADMIN (root on the subprocess runtime) acting on the host through other means (`umount /proc`
reveals the host's, ptrace through it); on the subprocess runtime the agent runs with the worker's rights.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from composer_prime.process.jail import JAIL, enter_jailed, host_sockets, program

if TYPE_CHECKING:
    from verifiers.v1.runtimes import Runtime

NS_VAR = "COMPOSER_PIDNS"
"""Runtime environment variable naming the holder (`<pid>`), read by the agent's workspace to enter the namespace."""
JAIL_VAR = "COMPOSER_JAIL"
"""Runtime environment variable naming the box's path when the namespace is a jail (`composer_prime.process.jail`)."""

OPEN_TIMEOUT_S = 30.0

_OPEN = r"""
jail=$1 jail_mode=$2 net=$3; shift 3  # then "--", the paths the jail hides, "--" (see composer_prime.process.jail)
for p in unshare nsenter; do command -v "$p" >/dev/null 2>&1 || { echo "refused: $p is not installed in the box"; exit 0; }; done
err=$(unshare --pid --fork --mount-proc true 2>&1) || { echo "refused: unshare --pid: ${err:-failed}" | head -c 300; exit 0; }
box=$(pwd -P)
export COMPOSER_JAIL_OUTER=$(readlink /proc/self/ns/mnt)
flags=(--pid --fork --kill-child --mount-proc --propagation private)
[ "$net" = closed ] && flags+=(--net)
# The holder ends once the box is gone: in the jail the box is a mount whose folder outlives the host's rmdir, so
# the test is the mounted folder's link count (0 once removed), read by the system's `stat` and `sleep`.
st=$(PATH=/usr/bin:/bin command -v stat) sl=$(PATH=/usr/bin:/bin command -v sleep)
holder=(bash -c 'echo ready; exec >/dev/null 2>&1; trap "" TERM INT HUP QUIT
while [ -d "$1" ] && [ "$("$2" -c %h -- "$1" 2>/dev/null)" != 0 ]; do "$3" 2 & wait $!; done' composer-pidns "$box" "$st" "$sl")
log=$(mktemp /tmp/composer-pidns-XXXXXXXX) || { echo "refused: cannot make a log file"; exit 0; }
trap 'rm -f "$log"' EXIT
cd /
if [ "$jail_mode" = jail ]; then
  shift  # "--": the jail's hidden paths follow; the box's siblings (other rollouts' boxes) join them
unshare "${flags[@]}" bash -c "$jail" composer-jail "$box" -- "$(dirname "$box")" "$@" "${holder[@]}" </dev/null >"$log" 2>&1 &
else
  unshare "${flags[@]}" "${holder[@]}" </dev/null >"$log" 2>&1 &
fi
u=$! c=
for ((i = 0; i < 1000; i++)); do
  grep -qx ready "$log" 2>/dev/null && read -r c _ 2>/dev/null < "/proc/$u/task/$u/children"
  [ -n "$c" ] && break
  kill -0 "$u" 2>/dev/null || break
  sleep 0.01
done
ns=$(readlink "/proc/$c/ns/pid" 2>/dev/null)
[ -n "$c" ] && [ -n "$ns" ] && [ "$ns" != "$(readlink /proc/$$/ns/pid)" ] || { echo "refused: the holder did not start: $(head -c 300 "$log" | tr '\n' ' ')"; exit 0; }
echo "holder $c $ns"
"""

_USERNS = r"""
h=$1; shift
if [ "$(readlink "/proc/$h/ns/user")" != "$(readlink /proc/self/ns/user)" ]; then
  exec "$1" "$2" "$3" --user "${@:4}"
fi
exec "$@"
"""
"""Run `nsenter -t <holder> ...` with `--user` added where the holder has a user namespace of its own."""

_CLOSE = r"""
h=$1 ns=$2
members() { find /proc/[0-9]*/ns/pid -maxdepth 0 -printf '%l\n' 2>/dev/null | grep -cxF -- "$ns"; }
before=$(members)
[ "$(readlink "/proc/$h/ns/pid" 2>/dev/null)" = "$ns" ] && kill -KILL "$h" 2>/dev/null
for ((i = 0; i < 1000; i++)); do
  left=$(members)
  [ "$left" = 0 ] && break
  sleep 0.01
done
echo "killed $before left $left"
"""


_OPEN_CONTAINER = r"""
init=$(tr '\0' ' ' < /proc/1/cmdline 2>/dev/null)
[ "$init" = "sleep infinity " ] || { echo "refused: the container's PID 1 is not the runtime's keep-alive: ${init:0:100}"; exit 0; }
echo "container $(readlink /proc/1/ns/pid)"
"""

_CLOSE_CONTAINER = r"""
ns=$1
[ "$(readlink /proc/1/ns/pid)" = "$ns" ] || { echo "moved"; exit 0; }
count() {  # live processes other than PID 1 and this shell (builtins only: no child of ours is counted)
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    { [ "$p" = 1 ] || [ "$p" = "$$" ]; } && continue
    read -r st < "$d/stat" 2>/dev/null || continue
    st=${st##*) }
    case ${st%% *} in Z|X) ;; *) n=$((n + 1)) ;; esac
  done
}
count; before=$n
for ((i = 0; i < 1000; i++)); do
  kill -KILL -1 2>/dev/null
  count
  [ "$n" = 0 ] && break
  sleep 0.01
done
echo "killed $before left $n"
"""

CONTAINER_RUNTIMES = frozenset({"DockerRuntime", "PodmanRuntime"})
"""verifiers runtimes whose box is a container of its own, started as `sleep infinity`, commands run by `exec`."""


@dataclass(frozen=True)
class Namespace:
    holder: str
    """PID of the namespace's PID 1 as the box sees it."""
    inode: str
    """`pid:[N]`: the namespace's identity, checked before the holder is killed (a reused PID is never killed)."""
    container: bool = False
    """The namespace is the container's own (`open_container`): its PID 1 is the runtime's, closing kills the rest."""
    jail: str | None = None
    """The box's path when the namespace is a jail (`composer_prime.process.jail`): commands enter it by that path, with no
    capability left."""
    network: bool = False
    """The namespace has a network namespace of its own (loopback only)."""


class NamespaceError(RuntimeError):
    """The namespace could not be closed, or members survived its end."""


async def open_namespace(
    runtime: Runtime,
    timeout_s: float = OPEN_TIMEOUT_S,
    *,
    jail: bool = False,
    hidden: tuple[str, ...] = (),
    network: bool = False,
) -> Namespace | str:
    """Start the holder in the box; the `Namespace`, or why none could be made (a sentence). With `jail`, the
    namespace is also a jail (`composer_prime.process.jail`) whose one writable folder is the box and which hides `hidden`;
    with `network`, it has a network namespace of its own (loopback only)."""
    argv = ["bash", "-c", _OPEN, "composer-pidns", JAIL, "jail" if jail else "plain", "closed" if network else "open"]
    if jail:  # the jail runs on this host (the subprocess runtime): its unix sockets are hidden too
        hidden = (*hidden, *host_sockets([]))
    result = await asyncio.wait_for(runtime.run([*argv, "--", *hidden, "--"], {}), timeout_s)
    words = (result.stdout or "").split()
    if result.exit_code == 0 and len(words) == 3 and words[0] == "holder" and words[1].isdigit():
        box = await runtime.run(["pwd", "-P"], {}) if jail else None
        where = (box.stdout or "").strip() if box is not None else None
        return Namespace(words[1], words[2], jail=where or None, network=network)
    text = " ".join(words) or (result.stderr or "").strip()[-300:] or f"exit {result.exit_code}"
    return text.removeprefix("refused: ")


def enter_argv(argv: list[str], holder: str, jail: str | None = None) -> list[str]:
    """`argv` run inside the namespace whose PID 1 is `holder`, in the caller's working directory; in a jail
    (`jail`: the box's path), with no capability left, in the box by its path."""
    if not holder.isdigit():
        raise ValueError(f"{NS_VAR}={holder!r} is not a PID; it is set by composer_prime.process.pidns.open_namespace")
    if jail:
        # the jail's own user namespace, where it has one (`nsenter` refuses to enter the one it is in)
        enter = [program("nsenter"), "-t", holder, "--ipc", "--uts", "--pid", "--mount", "--net", "--"]
        user = ["bash", "-c", _USERNS, "composer-enter", holder]
        return [*user, *enter, *enter_jailed(argv, jail)]
    return ["nsenter", "-t", holder, "--pid", "--mount", "--wd=.", "--", *argv]


async def close_namespace(runtime: Runtime, namespace: Namespace, timeout_s: float = OPEN_TIMEOUT_S) -> int:
    """Kill the namespace whole; returns how many processes it held. NamespaceError when any survive."""
    argv = ["bash", "-c", _CLOSE, "composer-pidns", namespace.holder, namespace.inode]
    result = await asyncio.wait_for(runtime.run(argv, {}), timeout_s)
    words = (result.stdout or "").split()
    if result.exit_code != 0 or len(words) != 4 or words[0] != "killed":
        raise NamespaceError(f"closing the PID namespace failed (exit {result.exit_code}): {result.stderr[-300:]}")
    if words[3] != "0":
        raise NamespaceError(f"{words[3]} process(es) of PID namespace {namespace.inode} survived its end")
    return int(words[1])


async def open_container(runtime: Runtime, timeout_s: float = OPEN_TIMEOUT_S) -> Namespace | str:
    """The PID namespace of a docker or podman box (`CONTAINER_RUNTIMES`), or why it cannot serve as the rollout's."""
    if type(runtime).__name__ not in CONTAINER_RUNTIMES:
        return f"the {type(runtime).__name__} box is not a container of its own"
    result = await asyncio.wait_for(runtime.run(["bash", "-c", _OPEN_CONTAINER, "composer-pidns"], {}), timeout_s)
    words = (result.stdout or "").split()
    if result.exit_code == 0 and len(words) == 2 and words[0] == "container":
        return Namespace("1", words[1], container=True)
    text = " ".join(words) or (result.stderr or "").strip()[-300:] or f"exit {result.exit_code}"
    return text.removeprefix("refused: ")


async def close_container(runtime: Runtime, namespace: Namespace, timeout_s: float = OPEN_TIMEOUT_S) -> int:
    """Kill every process of the container but its PID 1; how many there were. NamespaceError when any survive."""
    argv = ["bash", "-c", _CLOSE_CONTAINER, "composer-pidns", namespace.inode]
    result = await asyncio.wait_for(runtime.run(argv, {}), timeout_s)
    words = (result.stdout or "").split()
    if result.exit_code != 0 or len(words) != 4 or words[0] != "killed":
        detail = " ".join(words) or (result.stderr or "")[-300:]
        raise NamespaceError(f"ending the container's processes failed (exit {result.exit_code}): {detail}")
    if words[3] != "0":
        raise NamespaceError(f"{words[3]} process(es) of the container survived SIGKILL")
    return int(words[1])
