"""The shell line every grading process starts under: a time limit and, where the box allows it, a network namespace
and (for the replay) a PID namespace of its own.

`launch_argv(isolate, limit, argv, own_pids)` runs `argv` under `timeout -k 5 <limit>` and, with `isolate`,
`unshare -n` (root) or `unshare -rn` (unprivileged, a user namespace), setting `COMPOSER_PRIME_NETNS=isolated` for
the launched script (which brings loopback up). With `own_pids` it adds `--pid --fork --kill-child` where the box
allows it: the launched script is then PID 1 of a namespace of its own, and when it exits (or `timeout` kills
`unshare`) the kernel kills every process it left, whatever it did to hide (`setsid`, a double fork, shed tags); no
process can leave a PID namespace. Before the launched program starts, the script prints one header line saying what
it got (`composer-prime-launch network=isolated|shared pids=own|shared`); it is always stdout's first line, so a
program that prints a header of its own prints it after the real one, and `marks` reads the first line only.
"""

from __future__ import annotations

HEADER = "composer-prime-launch"
# Arguments: isolate (1/0), time limit, own PID namespace (1/0), then the interpreter's argv.
LAUNCH = f"""
isolate="$1"; limit="$2"; pids="$3"; shift 3
u="" net=shared own=shared
if [ "$isolate" = 1 ]; then
  if unshare -n true 2>/dev/null; then u="unshare -n"; elif unshare -rn true 2>/dev/null; then u="unshare -rn"; fi
  if [ -n "$u" ]; then export COMPOSER_PRIME_NETNS=isolated; net=isolated; fi
fi
if [ "$pids" = 1 ]; then
  p="--pid --fork --kill-child"
  for try in "${{u:-unshare}}" "${{u:-unshare -r}}"; do
    if $try $p true 2>/dev/null; then u="$try $p"; own=own; break; fi
  done
fi
echo "{HEADER} network=$net pids=$own"
if command -v timeout >/dev/null 2>&1; then exec timeout -k 5 "$limit" $u "$@"; fi
exec $u "$@"
"""


def launch_argv(isolate: bool, limit_s: float, argv: list[str], own_pids: bool = False) -> list[str]:
    """`argv` under the time limit and (with `isolate`) a network namespace of its own; with `own_pids`, also a PID
    namespace of its own where the box allows it (see the module docstring)."""
    flags = ["1" if isolate else "0", f"{limit_s:g}", "1" if own_pids else "0"]
    return ["sh", "-c", LAUNCH, "composer-prime-grade", *flags, *argv]


def marks(stdout: str) -> tuple[bool, bool]:
    """(network isolated, own PID namespace), as the launcher's header (stdout's first line) says."""
    words = stdout.split("\n", 1)[0].split()
    if len(words) != 3 or words[0] != HEADER:
        return False, False
    return words[1] == "network=isolated", words[2] == "pids=own"
