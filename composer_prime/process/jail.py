"""The jail: a read-only view of the host in which the agent's commands and the code under test run on the subprocess
runtime, with the expected side of the task hidden and no capability left.

On the subprocess runtime a box is a host folder and the agent runs as the worker's user (root, where PID namespaces
can be made). Without more, the agent can read the task's expected side on the host (the mined tasks file with its
gold patches, swe-gym's recorded oracles and source clones), and write the host's programs (a `timeout` planted in a
shared venv's `bin`, first on `PATH`, that grading would run after the agent). The jail closes both, with the
kernel's mount namespaces instead of another uid (a box under `/root/.cache` is unreachable to any other uid):

1. it runs in a mount namespace of its own (`unshare --mount --propagation private`: nothing it mounts reaches the
   host); it refuses to touch anything unless its mount namespace differs from the caller's (`outer`);
2. each writable folder (the box; at grading the private copy and the launcher's scratch) is bound onto a private
   stage (a fresh tmpfs over `/dev/shm`), `/tmp` and `/var/tmp` become fresh tmpfs (other rollouts' and gradings'
   folders under `/tmp` are out of sight), every hidden path is covered (a folder by an empty tmpfs of mode 000, a
   file by `/dev/null`), every other mount is remounted read-only, and the writable folders are moved back to their
   own paths, writable;
3. loopback is brought up (for a network namespace of its own) and the program is executed in an IPC, a UTS and a
   user namespace of its own (root mapped to root: the host's System V IPC objects, root's keyrings and the host
   name, where a program could leave what it read for a later rollout, are out of reach), with an empty capability
   bounding set and `no_new_privs` (`setpriv`): it can neither unmount a cover, remount a folder writable, nor regain
   a capability through a set-uid program. `/run` is covered too (the sockets of the host's daemons), and so is
   every other path a unix socket of the host is bound at (`host_sockets`). Root without CAP_DAC_OVERRIDE still owns
   root's files, which is why the covers and the read-only mounts, not file modes, hold;
4. the kernel's own file systems: `/sys` and every mount under it (the cgroup tmpfs among them) read-only like the
   rest; as PID 1 of a PID namespace, a `/proc` of its own; and, as docker keeps them, `/proc/sys`,
   `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus` and `/proc/fs` read-only, `/proc/kcore`, `/proc/keys`,
   `/proc/timer_list`, `/proc/sched_debug`, `/proc/acpi` and `/proc/scsi` covered. Root by uid may write the kernel's
   settings in any namespace: a `core_pattern` pipe would run a program as the host's root, and `/sys/fs/cgroup` or
   the domain name would carry a memo of the held-out tests' answers from one rollout to the next.

The caller (`pidns.open_namespace` for the rollout, `grading.launch` for the replay and the suite) names the mount
namespace it runs in (`COMPOSER_JAIL_OUTER`, `mnt:[N]`) and starts the jail in a fresh one. Every program here is named by a host path (`SYSTEM_PATH`), never looked up
on the box's `PATH`. Making a jail needs CAP_SYS_ADMIN (root on the host); where it cannot be made the caller gets
the reason, and the tasksets refuse to train unless told otherwise (`expected_side`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Where grading and the jail find their own programs: the system's folders, never a venv's `bin` or the box."""

STAGE = "/dev/shm"
"""A tmpfs is mounted here first; the writable folders wait on it while the rest goes read-only."""

JAIL = rf"""
set -u
outside_path=$PATH
PATH={SYSTEM_PATH}
fail() {{ echo "composer-jail: $*" >&2; exit 125; }}
outer=${{COMPOSER_JAIL_OUTER:-}}
unset COMPOSER_JAIL_OUTER
[ -n "$outer" ] || fail "COMPOSER_JAIL_OUTER (the caller's mount namespace) is not set"
writable=() hidden=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do writable+=("$1"); shift; done; [ $# -gt 0 ] && shift
while [ $# -gt 0 ] && [ "$1" != -- ]; do hidden+=("$1"); shift; done; [ $# -gt 0 ] && shift
[ $# -gt 0 ] || fail "no program to run"
[ "$(readlink /proc/self/ns/mnt)" != "$outer" ] || fail "not in a mount namespace of its own"
mount -n --make-rprivate / || fail "cannot make the mounts private"
# PID 1 of a PID namespace of its own: a /proc of that namespace (the host's processes out of sight)
if [ "$$" = 1 ]; then mount -n -t proc -o nosuid,nodev,noexec composer-jail-proc /proc || fail "cannot mount /proc"; fi
# the kernel's settings are the host's in every namespace, and root (by uid) may write them: read-only, as docker
# keeps them (a core_pattern pipe would run a program as the host's root; /sys/fs/cgroup would carry state between
# rollouts); the rest of /sys goes read-only in the loop below
for k in /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs; do
  [ -e "$k" ] || continue
  mount -n --bind "$k" "$k" && mount -n -o remount,bind,ro "$k" || fail "cannot make $k read-only"
done
for k in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/acpi /proc/scsi; do
  if [ -d "$k" ]; then mount -n -t tmpfs -o ro,mode=000,size=4k composer-jail-hidden "$k" || fail "cannot hide $k"
  elif [ -e "$k" ]; then mount -n --bind /dev/null "$k" || fail "cannot hide $k"; fi
done
mount -n -t tmpfs -o mode=700 composer-jail-stage /dev/shm || fail "cannot mount the stage on /dev/shm"
i=0
for w in "${{writable[@]}}"; do
  [ -d "$w" ] || fail "writable folder $w is missing"
  mkdir "/dev/shm/$i" && mount -n --rbind -- "$w" "/dev/shm/$i" || fail "cannot bind $w"
  i=$((i + 1))
done
mount -n -t tmpfs -o mode=1777 composer-jail-tmp /tmp || fail "cannot mount a private /tmp"
if [ -d /var/tmp ]; then mount -n -t tmpfs -o mode=1777 composer-jail-tmp /var/tmp || fail "cannot mount a private /var/tmp"; fi
for h in /run /var/run; do [ -d "$h" ] && hidden+=("$h"); done  # host daemons' sockets (a container engine's)
for h in "${{hidden[@]}}"; do
  inner=()  # writable folders under a hidden one (the box under the folder of every rollout's boxes)
  for w in "${{writable[@]}}"; do case "$w/" in "${{h%/}}"/*) inner+=("$w") ;; esac; done
  if [ ${{#inner[@]}} -gt 0 ] && [ -d "$h" ]; then
    mount -n -t tmpfs -o mode=755,size=64k composer-jail-hidden "$h" && mkdir -p -- "${{inner[@]}}" || fail "cannot hide $h"
  elif [ ${{#inner[@]}} -eq 0 ] && [ -d "$h" ]; then mount -n -t tmpfs -o ro,mode=000,size=4k composer-jail-hidden "$h" || fail "cannot hide $h"
  elif [ -e "$h" ]; then mount -n --bind /dev/null "$h" || fail "cannot hide $h"; fi
done
while read -r _ raw fstype _; do
  case "$fstype" in nsfs|proc|binfmt_misc|autofs) continue ;; esac
  mnt=$(printf '%b' "$raw")  # /proc/self/mounts writes a space as \040
  case "$mnt" in /proc|/proc/*|/dev/shm|/dev/shm/*|/tmp|/tmp/*|/var/tmp|/var/tmp/*) continue ;; esac
  under=0  # a mount under a cover is out of sight already (and cannot be reached to remount)
  for h in "${{hidden[@]}}"; do case "$mnt" in "${{h%/}}"/*) under=1 ;; esac; done
  [ "$under" = 1 ] && continue
  # a mount the host removed meanwhile (a container's network namespace file) is gone from here too: no failure
  # a kernel file system under /sys that refuses a read-only remount is covered instead
  mount -n -o remount,bind,ro -- "$mnt" 2>/dev/null ||
    ! awk -v m="$raw" '$2 == m {{ found = 1 }} END {{ exit !found }}' /proc/self/mounts ||
    {{ case "$mnt" in /sys/*) mount -n -t tmpfs -o ro,mode=000,size=4k composer-jail-hidden "$mnt" ;; *) false ;; esac; }} ||
    fail "cannot make $mnt read-only"
done < <(cat /proc/self/mounts)
i=0
for w in "${{writable[@]}}"; do
  mkdir -p -- "$w" 2>/dev/null
  mount -n --move -- "/dev/shm/$i" "$w" || fail "cannot put $w back"
  i=$((i + 1))
done
here=$(pwd -P 2>/dev/null) && cd -- "$here" 2>/dev/null || cd /
ip link set lo up 2>/dev/null || true
drop=$(command -v setpriv) || fail "setpriv is not installed"
un=$(command -v unshare) || fail "unshare is not installed"
# IPC objects, the user's keyrings and the host name are the host's in every mount namespace: a program could leave
# what it read at grading (the held-out tests) there for a later rollout. A namespace of each (root mapped to root)
# closes them.
own=(--ipc --uts --user --map-root-user)
"$un" "${{own[@]}}" true 2>/dev/null || own=(--ipc --uts)
PATH=$outside_path exec "$un" "${{own[@]}}" -- "$drop" --bounding-set=-all --inh-caps=-all --no-new-privs -- "$@"
"""

ENTER = r"""
cd -- "$1" || { echo "composer-jail: cannot enter $1" >&2; exit 125; }
shift
exec "$@"
"""


def program(name: str) -> str:
    """`name` by its host path in `SYSTEM_PATH` (the name itself where it is not found there)."""
    return shutil.which(name, path=SYSTEM_PATH) or name


COVERED_ALREADY = ("/run/", "/var/run/", "/tmp/", "/var/tmp/", "/dev/shm/")
"""Folders the jail covers or replaces whole: a socket under one needs no cover of its own."""


def host_sockets(writable: list[str], table: str = "/proc/net/unix") -> list[str]:
    """The paths of the host's bound unix sockets (`/proc/net/unix`, the caller's network namespace: the host's on
    the subprocess runtime) outside the folders the jail covers whole and outside `writable`. A unix socket is reached
    by its path from any network namespace, and a read-only mount does not stop `connect`: a daemon's socket in a
    home or state folder (an agent's, an editor's, a container engine's) would be a way out, so the jail covers each.
    Abstract sockets (`@name`) belong to the network namespace, which the closed box leaves behind. A socket bound
    after the jail was made is not covered."""
    try:
        lines = Path(table).read_text(encoding="utf-8", errors="replace").splitlines()[1:]
    except OSError:
        return []
    inside = tuple(path.rstrip("/") + "/" for path in writable)
    found: dict[str, None] = {}
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) < 8 or not fields[7].startswith("/"):
            continue
        path = fields[7]
        if path.startswith(COVERED_ALREADY + inside) or path.startswith("/proc/"):
            continue
        if os.path.exists(path):
            found[path] = None
    return list(found)


def jail_argv(writable: list[str], hidden: list[str], argv: list[str]) -> list[str]:
    """`argv` in the jail, to be run by root in a fresh mount namespace, with `COMPOSER_JAIL_OUTER` naming the
    caller's; the host's unix sockets are hidden too (`host_sockets`)."""
    for path in [*writable, *hidden]:
        if not path.startswith("/") or path == "--":
            raise ValueError(f"jail paths must be absolute: {path!r}")
    hidden = [*hidden, *host_sockets(writable)]
    return [program("bash"), "-c", JAIL, "composer-jail", *writable, "--", *hidden, "--", *argv]


def enter_jailed(argv: list[str], box: str) -> list[str]:
    # `nsenter` enters the holder's user and IPC namespaces first (`pidns.enter_argv`); this drops what it gained.
    """`argv` as the jail's commands run after `nsenter` into it: capabilities dropped, then in `box` by its path
    (a working directory handed over by `nsenter --wd` would still be the host's mount, writable and climbable)."""
    drop = [program("setpriv"), "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]
    return [*drop, program("bash"), "-c", ENTER, "composer-enter", box, *argv]
