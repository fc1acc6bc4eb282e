"""The shell line every grading process starts under: a time limit and, where the box allows it, a network namespace,
(for the replay) a PID namespace of its own, and (on the subprocess runtime) the jail.

`launch_argv(isolate, limit, argv, own_pids, jail)` runs `argv` under `timeout -k 5 <limit>` and, with `isolate`,
`unshare -n` (root) or `unshare -rn` (unprivileged, a user namespace), setting `COMPOSER_PRIME_NETNS=isolated` for
the launched script (which brings loopback up). With `own_pids` it adds `--pid --fork --kill-child` where the box
allows it: the launched script is then PID 1 of a namespace of its own, and when it exits (or `timeout` kills
`unshare`) the kernel kills every process it left, whatever it did to hide (`setsid`, a double fork, shed tags); no
process can leave a PID namespace. With `jail` (`Jail`: the folders the run may write and the host paths it must not
read) it adds `--mount` and runs `argv` in `composer_prime.process.jail`: the host read-only, the expected side covered, no
capability left (the jail brings loopback up itself). `timeout` and `unshare` are found in the system's folders
(`jail.SYSTEM_PATH`), never on the box's `PATH`, where the agent may have put programs of its own. Before the
launched program starts, the script prints one header line saying what it got (`composer-prime-launch
network=isolated|shared pids=own|shared jail=on|off`); it is always stdout's first line, so a program that prints a
header of its own prints it after the real one, and `marks` reads the first line only.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_prime.process.jail import SYSTEM_PATH, jail_argv

HEADER = "composer-prime-launch"
SH = "/bin/sh"
"""The shell every launch starts in, by its path: a box's `PATH` may lead to a `sh` of the agent's."""
# Arguments: isolate (1/0), time limit, own PID namespace (1/0), how many of the following arguments are the jail's
# (0: none), then the interpreter's argv.
LAUNCH = f"""
isolate="$1"; limit="$2"; pids="$3"; jailn="$4"; shift 4
t=$(PATH={SYSTEM_PATH} command -v timeout); un=$(PATH={SYSTEM_PATH} command -v unshare)
u="" net=shared own=shared jail=off userns=0
if [ "$isolate" = 1 ] && [ -n "$un" ]; then
  if $un -n true 2>/dev/null; then u="$un -n"; elif $un -rn true 2>/dev/null; then u="$un -rn"; userns=1; fi
  if [ -n "$u" ]; then export COMPOSER_PRIME_NETNS=isolated; net=isolated; fi
fi
if [ "$pids" = 1 ] && [ -n "$un" ]; then
  p="--pid --fork --kill-child"
  for try in "${{u:-$un}}" "${{u:-$un -r}}"; do
    if $try $p true 2>/dev/null; then
      u="$try $p"; own=own
      case "$try" in *" -r"*) userns=1 ;; esac
      break
    fi
  done
fi
if [ "$jailn" -gt 0 ]; then
  m="--mount --propagation private"
  if [ "$userns" = 0 ] && [ -n "$un" ] && ${{u:-$un}} $m true 2>/dev/null; then
    u="${{u:-$un}} $m"; jail=on
    COMPOSER_JAIL_OUTER=$(readlink /proc/self/ns/mnt); export COMPOSER_JAIL_OUTER
    [ "$net" = isolated ] && export COMPOSER_PRIME_NETNS=jailed  # loopback is the jail's to bring up
  else
    shift "$jailn"
  fi
fi
echo "{HEADER} network=$net pids=$own jail=$jail"
if [ -n "$t" ]; then exec "$t" -k 5 "$limit" $u "$@"; fi
exec $u "$@"
"""


@dataclass(frozen=True)
class Jail:
    """What a jailed grading process may write and must not read (`composer_prime.process.jail`)."""

    writable: tuple[str, ...]
    """Absolute folders the run writes: the private copy, the launcher's scratch."""
    hidden: tuple[str, ...] = ()
    """Absolute host paths the code under test must not read: the task's expected side."""


def launch_argv(
    isolate: bool, limit_s: float, argv: list[str], own_pids: bool = False, jail: Jail | None = None
) -> list[str]:
    """`argv` under the time limit and (with `isolate`) a network namespace of its own; with `own_pids`, also a PID
    namespace of its own where the box allows it; with `jail`, in the jail (see the module docstring)."""
    prefix = jail_argv(list(jail.writable), list(jail.hidden), []) if jail is not None else []
    flags = ["1" if isolate else "0", f"{limit_s:g}", "1" if own_pids else "0", str(len(prefix))]
    return [SH, "-c", LAUNCH, "composer-prime-grade", *flags, *prefix, *argv]


def marks(stdout: str) -> tuple[bool, bool]:
    """(network isolated, own PID namespace), as the launcher's header (stdout's first line) says."""
    words = stdout.split("\n", 1)[0].split()
    if len(words) != 4 or words[0] != HEADER:
        return False, False
    return words[1] == "network=isolated", words[2] == "pids=own"


def jailed(stdout: str) -> bool:
    """Whether the launched program ran in the jail, as the launcher's header says."""
    words = stdout.split("\n", 1)[0].split()
    return len(words) == 4 and words[0] == HEADER and words[3] == "jail=on"
