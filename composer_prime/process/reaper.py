"""The process reaper: kill every process a rollout started in its box, wherever it went, and nothing else.

A rollout's commands may leave processes behind: `cmd &`, `nohup`, `setsid`, a double fork that reparents to init, a
daemon that clears its environment (`env -i`) and `cd /`. The box's own teardown does not catch them on the
subprocess runtime (the host), and a long-lived container or sandbox keeps them running between uses. The reaper
finds them by tags every process the box starts carries, and kills them until a scan finds none.

Usage (the launcher of the box's processes, and whoever ends the box):

    token = new_token()                                   # one per box (rollout, grading run)
    await runtime.run(box_argv(argv, token), env)         # every process the box starts, through the runtime
    ...
    killed = await reap_box(runtime, workdir, token)      # at the end (also on cancellation: shield it)

`box_argv` runs `argv` under a short bash prologue that sets two tags, then `exec`s it:

1. the environment variable `COMPOSER_BOX=<token>` (`BOX_VAR`), inherited by every child that keeps its environment;
2. the hard limit of `RLIMIT_RTTIME` set to the token's number (`ulimit -R`, else `prlimit`). A resource limit is
   inherited across fork and exec, survives `setsid`, `nohup`, `env -i`, `cd` and reparenting, and an unprivileged
   process can lower a hard limit but never raise it. RTTIME only bounds CPU time of real-time-scheduled threads,
   which the box's processes do not use, so the tag changes nothing they do.

The box needs bash and GNU find (`-printf`); `workdir` is compared by its physical path. `reap_box` runs one bash
script through `runtime.run` (on the host for the subprocess runtime, inside the container
for docker/prime), so it sees the box's own `/proc`. A process is the box's when any of these holds:

- its environment (`/proc/P/environ`, the one it was exec'd with) holds `COMPOSER_BOX=<token>`;
- its `RLIMIT_RTTIME` hard limit (`/proc/P/limits`) equals the token;
- its working directory (`/proc/P/cwd`) is `workdir` or under it (unless `by_workdir=False`);
- its parent is the box's.

Never touched: PID 1, the reaper script itself, its children and its ancestors (the worker and test runner that
called it, the container's exec agent). Each round freezes every process found (SIGSTOP, so none can fork while the
round kills), then SIGKILLs them, and scans again; it stops when a scan finds nothing (or after `MAX_ROUNDS`).
Zombies count as dead.

What is guaranteed, on the subprocess runtime (processes on the host) and in containers alike: every process that
descends from a `box_argv` command and still carries one of the tags is killed, whatever it did with its session,
process group, parent, environment or working directory. Not guaranteed:

- a process that deliberately lowers its own `RLIMIT_RTTIME` hard limit *and* drops the variable *and* leaves the work
  directory *and* is orphaned from the box's tree before a scan (all four on purpose) escapes;
- a process with `CAP_SYS_RESOURCE` (root on the host, or root in a container that kept the capability) can reset
  the limit, so the limit tag is only as strong as the box's privileges; on the subprocess runtime a rollout runs with
  the worker's privileges;
- processes started by something outside the box on its behalf (`systemd-run`, `at`, cron, ssh to localhost, a
  docker socket) carry no tag;
- if the host's `RLIMIT_RTTIME` hard limit is already below the token (a box inside a box), or the box has neither
  bash >= 5.1 (`ulimit -R`) nor util-linux `prlimit`, the limit tag is not set; the variable, the directory and the
  ancestry still apply. Processes started by `runtime.run` without `box_argv` get only those three;
- PID reuse between a scan and its kill (microseconds) is not excluded: Linux offers no race-free kill by identity
  to a shell. The work directory test is a prefix test on the path, so a process of someone else whose working
  directory lies inside the box's directory is taken as the box's.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verifiers.v1.runtimes import Runtime

BOX_VAR = "COMPOSER_BOX"
"""Environment variable `box_argv` sets to the box's token; the launcher may also pass it in `runtime.run`'s env."""

TOKEN_MIN = 1 << 40
TOKEN_MAX = (1 << 41) - 1
"""Tokens are decimal integers in [2^40, 2^41): large enough to be unique per box, below RLIM_INFINITY."""

MAX_ROUNDS = 50
"""Scan-and-kill rounds before the reaper gives up on processes that will not die (uninterruptible sleep)."""

REAP_TIMEOUT_S = 30.0
"""Default bound on one `reap_box` call."""

_TAG = r"""
export COMPOSER_BOX="$1"
ulimit -R "$1" 2>/dev/null || prlimit --rttime="$1:$1" --pid $$ >/dev/null 2>&1
shift
exec "$@"
"""

_REAP = r"""
tok=$1 rounds=$2 root=${3%/} bydir=$4
[ -d "$3" ] && root=$(cd -P -- "$3" && pwd -P)
cd / || exit 1
me=$$
declare -A keep=([0]=1 [1]=1 [$me]=1)
p=$me
while [[ $p && $p != 0 && $p != 1 ]]; do  # ancestors: the caller's worker, test runner, exec agent
  s=; IFS= read -r -d '' s 2>/dev/null < "/proc/$p/stat"
  [[ $s ]] || break
  f=(${s##*) }); p=${f[1]}; keep[$p]=1
done
scan() {  # sets `found`: the box's live processes, minus `keep` and this script's own children
  local d p s e l c f
  declare -A ppid=() box=()
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    s=; IFS= read -r -d '' s 2>/dev/null < "$d/stat"
    [[ $s ]] || continue
    f=(${s##*) })
    [[ ${f[0]} == [ZX] ]] && continue
    ppid[$p]=${f[1]}
    while IFS= read -r -d '' e; do
      [[ $e == "COMPOSER_BOX=$tok" ]] && { box[$p]=1; break; }
    done 2>/dev/null < "$d/environ"
    [[ ${box[$p]} ]] && continue
    while read -r l; do
      [[ $l == "Max realtime timeout "* ]] || continue
      f=($l); [[ ${f[4]} == "$tok" ]] && box[$p]=1; break
    done 2>/dev/null < "$d/limits"
  done
  if ((bydir)); then
    while IFS= read -r -d '' d && IFS= read -r -d '' c; do
      case $c in "$root" | "$root"/* | "$root (deleted)") box[${d#/proc/}]=1 ;; esac
    done < <(find /proc/[0-9]*/cwd -maxdepth 0 -printf '%h\0%l\0' 2>/dev/null)
  fi
  local changed=1
  while ((changed)); do
    changed=0
    for p in "${!ppid[@]}"; do
      if [[ ! ${box[$p]} && ${box[${ppid[$p]}]} ]]; then box[$p]=1; changed=1; fi
    done
  done
  found=()
  for p in "${!box[@]}"; do
    [[ ${ppid[$p]} && ! ${keep[$p]} && ${ppid[$p]} != "$me" ]] && found+=("$p")
  done
}
declare -A killed=()
for ((r = 0; r <= rounds; r++)); do
  scan
  ((${#found[@]})) && ((r < rounds)) || break
  kill -STOP "${found[@]}" 2>/dev/null
  kill -KILL "${found[@]}" 2>/dev/null
  for p in "${found[@]}"; do killed[$p]=1; done
  sleep 0.02
done
echo "killed ${#killed[@]} left ${#found[@]}"
"""


class ReapError(RuntimeError):
    """The reaper could not run in the box, or processes survived every round."""


def new_token() -> str:
    """A fresh box token: a random decimal integer in [TOKEN_MIN, TOKEN_MAX]."""
    return str(TOKEN_MIN + secrets.randbelow(TOKEN_MAX - TOKEN_MIN + 1))


def _check(token: str) -> str:
    if not (token.isascii() and token.isdigit() and TOKEN_MIN <= int(token) <= TOKEN_MAX):
        raise ValueError(
            f"box token {token!r} is not a reaper token; make one with composer_prime.process.reaper.new_token()"
        )
    return token


def box_env(token: str) -> dict[str, str]:
    """The environment entry that tags a process as the box's (`box_argv` sets it too)."""
    return {BOX_VAR: _check(token)}


def box_argv(argv: list[str], token: str) -> list[str]:
    """`argv`, run under the prologue that tags it (variable and rlimit) as the box's; needs bash in the box."""
    return ["bash", "-c", _TAG, "composer-box", _check(token), *argv]


def reap_argv(workdir: str, token: str, by_workdir: bool = True) -> list[str]:
    """The reaper's command line for `reap_box` (or a batch of grading steps that runs it in the box)."""
    if not workdir.startswith("/") or workdir.rstrip("/") == "":
        raise ValueError(
            f"workdir {workdir!r} is not an absolute directory below '/'; pass the box's own work directory "
            "(every process's working directory lies under '/')"
        )
    return ["bash", "-c", _REAP, "composer-reaper", _check(token), str(MAX_ROUNDS), workdir, str(int(by_workdir))]


def reaped(exit_code: int | None, stdout: str, stderr: str, token: str) -> int:
    """How many processes a run of `reap_argv` killed; ReapError when it failed or processes survived."""
    words = stdout.split()
    if exit_code != 0 or len(words) != 4 or words[0] != "killed":
        raise ReapError(f"reaper failed in the box (exit {exit_code}): {(stdout + stderr)[-500:]}")
    killed, left = int(words[1]), int(words[3])
    if left:
        raise ReapError(f"{left} process(es) of box {token} survived {MAX_ROUNDS} kill rounds (killed {killed})")
    return killed


async def reap_box(
    runtime: Runtime, workdir: str, token: str, *, by_workdir: bool = True, timeout_s: float = REAP_TIMEOUT_S
) -> int:
    """Kill every process of the box tagged `token` or working under `workdir`; returns how many were killed.

    `workdir` is the box's work directory as the box sees it (the subprocess runtime's `runtime.workdir`, the
    container's working directory). `by_workdir=False` drops the working-directory test: for a caller whose every
    process is started with `box_argv` and that must spare processes others started in the same directory (a task's
    service, verifiers' tool servers). Raises ReapError when the script cannot run or processes survive all rounds
    (e.g. stuck in uninterruptible sleep); TimeoutError past `timeout_s`. Call it shielded from cancellation."""
    argv = reap_argv(workdir, token, by_workdir)
    result = await asyncio.wait_for(runtime.run(argv, {}), timeout_s)
    return reaped(result.exit_code, result.stdout, result.stderr, token)
