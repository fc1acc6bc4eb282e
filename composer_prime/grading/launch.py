"""The shell line every grading process starts under: a time limit and, where the box allows it, a network namespace,
(for the replay) a PID namespace of its own, (on the subprocess runtime) the jail, and a cap on its output.

`launch_argv(isolate, limit, argv, own_pids, cap, jail)` runs `argv` under `timeout -k 5 <limit>` and, with
`isolate`, `unshare -n` (root) or `unshare -rn` (unprivileged, a user namespace), setting
`COMPOSER_PRIME_NETNS=isolated` for the launched script (which brings loopback up). With `own_pids` it adds `--pid
--fork --kill-child` where the box allows it: the launched script is then PID 1 of a namespace of its own, and when it
exits (or `timeout` kills `unshare`) the kernel kills every process it left, whatever it did to hide (`setsid`, a
double fork, shed tags); no process can leave a PID namespace. With `jail` (`Jail`: the folders the run may write and
the host paths it must not read) it adds `--mount` and runs `argv` in `composer_prime.process.jail`: the host
read-only, the expected side covered, no capability left (the jail brings loopback up itself). `timeout` and
`unshare` are found in the system's folders (`jail.SYSTEM_PATH`), never on the box's `PATH`, where the agent may have
put programs of its own. Before the launched program starts, the script prints one header line saying what it got
(`composer-prime-launch network=isolated|shared pids=own|shared jail=on|off`); it is always stdout's first line, so
a program that prints a header of its own prints it after the real one, and `marks` reads the first line only.

The launched program starts with the env server's credential-like variables unset (`without_secrets`).

With `cap` (the grading interpreter), the launched program's stdout and stderr reach the caller through a capping
stage (`CAP`, run by that interpreter with `-I -S -B`): verifiers' runtimes return a command's output whole, so
without it 1 GiB written to the outcome stream's descriptor is 1 GiB (and more, decoded) in the grading process. The
stage is the launched program's parent, outside its PID namespace when it has one; it keeps the first and the last
`OUT_HEAD`/`OUT_TAIL` bytes of stdout (`ERR_HEAD`/`ERR_TAIL` of stderr), drops the middle with a note, stops
reading 2 s after the program exits (a process that kept the pipes open is not waited for), and ends stdout with
one trailer line, `composer-prime-cap stdout <bytes> <dropped> stderr <bytes> <dropped>`. `overflow` turns a
trailer that dropped stdout into a void reason: the outcome stream and the replay's answers are judged whole or not
at all. The stage marks itself not dumpable, so its own descriptors (the runtime's pipes) cannot be reopened
through `/proc/<pid>/fd` by a process without CAP_SYS_PTRACE.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from composer_prime.process.jail import SYSTEM_PATH, jail_argv

HEADER = "composer-prime-launch"
SH = "/bin/sh"
"""The shell every launch starts in, by its path: a box's `PATH` may lead to a `sh` of the agent's."""
# Arguments: isolate (1/0), time limit, own PID namespace (1/0), the capping interpreter (or empty), the capping
# stage's source, how many of the following arguments are the jail's (0: none), then the launched program's argv.
LAUNCH = f"""
isolate="$1"; limit="$2"; pids="$3"; cap="$4"; source="$5"; jailn="$6"; shift 6
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
if [ -n "$t" ]; then set -- "$t" -k 5 "$limit" $u "$@"; else set -- $u "$@"; fi
if [ -n "$cap" ]; then exec "$cap" -I -S -B -c "$source" "$@"; fi
exec "$@"
"""
OUT_HEAD, OUT_TAIL = 8 << 20, 8 << 20
"""Bytes of the launched program's stdout (the outcome stream, the replay's answers) kept from its start and end."""
ERR_HEAD, ERR_TAIL = 64 << 10, 256 << 10
"""Bytes of its stderr (the code under test's own output, shown in `output_tail`) kept from its start and end."""
TRAILER = "composer-prime-cap"
CAP = f"""
import os, selectors, subprocess, sys, time
try:  # not dumpable: /proc/<this pid>/fd (the runtime's pipes) closed to processes without CAP_SYS_PTRACE
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
except Exception:
    pass
class Cap:
    def __init__(self, fd, head, tail):
        self.fd, self.head, self.tail, self.seen, self.kept, self.last = fd, head, tail, 0, bytearray(), b"\\n"
    def put(self, data):
        while data:
            try:
                data = data[os.write(self.fd, data):]
            except OSError:
                return
    def feed(self, data):
        room = max(0, self.head - self.seen)
        self.seen += len(data)
        if room:
            self.put(data[:room])
            self.last = data[:room][-1:] or self.last
        self.kept += data[room:]
        if len(self.kept) > 2 * self.tail:
            del self.kept[: len(self.kept) - self.tail]
    def finish(self):
        kept = bytes(self.kept[-self.tail:]) if self.tail else b""
        dropped = self.seen - min(self.seen, self.head) - len(kept)
        if dropped:
            self.put(b"\\n[composer-prime: %d bytes dropped here]\\n" % dropped)
        self.put(kept)
        self.last = kept[-1:] or self.last
        return dropped
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
caps = {{child.stdout: Cap(1, {OUT_HEAD}, {OUT_TAIL}), child.stderr: Cap(2, {ERR_HEAD}, {ERR_TAIL})}}
select = selectors.DefaultSelector()
for pipe in caps:
    select.register(pipe, selectors.EVENT_READ)
deadline = None
while select.get_map():
    if deadline is None and child.poll() is not None:
        deadline = time.monotonic() + 2
    if deadline is not None and time.monotonic() > deadline:
        break
    for key, _ in select.select(0.5):
        data = os.read(key.fileobj.fileno(), 1 << 16)
        if data:
            caps[key.fileobj].feed(data)
        else:
            select.unregister(key.fileobj)
code = child.wait()
out, err = caps[child.stdout], caps[child.stderr]
dropped = out.finish(), err.finish()
trailer = b"{TRAILER} stdout %d %d stderr %d %d\\n" % (out.seen, dropped[0], err.seen, dropped[1])
out.put((b"" if out.last == b"\\n" else b"\\n") + trailer)
sys.exit(code if code >= 0 else 128 - code)
"""


SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|AUTH|KEY)(?:$|_|S$)|SECRET|PASSW|CREDENTIAL|APIKEY|COOKIE|PRIVATE", re.IGNORECASE
)
"""Names of environment variables that hold credentials (`HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`,
`OPENAI_API_KEY`, `PGPASSWORD`, `SSH_AUTH_SOCK`): the env server's environment is handed to every command a box runs
on the subprocess runtime, and an agent that runs `env` puts them on its trace, from where they reach PRIME-RL's
rollout files and the data that trains (red40's R5)."""


UNSET = 'while [ $# -gt 0 ] && [ "$1" != -- ]; do unset "$1" 2>/dev/null; shift; done; shift; exec "$@"'


def without_secrets(argv: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """`argv` run with every credential-like variable of `environ` (this process's, whose environment the runtime
    hands on) unset by `/bin/sh` (in a box or a container alike): what the code under test may not read at grading
    (the agent's own commands start from `env -i` in composer-agent's workspace)."""
    names = sorted(name for name in (os.environ if environ is None else environ) if SECRET_NAME.search(name))
    if not names:
        return argv
    return ["/bin/sh", "-c", UNSET, "composer-unset", *names, "--", *argv]


@dataclass(frozen=True)
class Jail:
    """What a jailed grading process may write and must not read (`composer_prime.process.jail`)."""

    writable: tuple[str, ...]
    """Absolute folders the run writes: the private copy, the launcher's scratch."""
    hidden: tuple[str, ...] = ()
    """Absolute host paths the code under test must not read: the task's expected side."""


def launch_argv(
    isolate: bool,
    limit_s: float,
    argv: list[str],
    own_pids: bool = False,
    cap: str | None = None,
    jail: Jail | None = None,
) -> list[str]:
    """`argv` under the time limit and (with `isolate`) a network namespace of its own; with `own_pids`, also a PID
    namespace of its own where the box allows it; with `cap` (an interpreter), its output capped by `CAP`; with
    `jail`, in the jail (see the module docstring)."""
    argv = without_secrets(argv)  # the env server's credentials are not the code under test's to read
    prefix = jail_argv(list(jail.writable), list(jail.hidden), []) if jail is not None else []
    flags = ["1" if isolate else "0", f"{limit_s:g}", "1" if own_pids else "0", cap or "", CAP, str(len(prefix))]
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


_TRAILER = re.compile(rf"^{TRAILER} stdout (\d+) (\d+) stderr (\d+) (\d+)$", re.MULTILINE)


def overflow(stdout: str, what: str) -> list[str]:
    """A void reason for each capping trailer in `stdout` that dropped stdout bytes (see the module docstring)."""
    return [
        f"{what}: the run wrote {int(seen)} bytes to its stdout, over the {OUT_HEAD + OUT_TAIL} byte cap "
        f"({int(dropped)} dropped unread)"
        for seen, dropped, _, _ in _TRAILER.findall(stdout)
        if int(dropped)
    ]
