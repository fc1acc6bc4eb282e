"""The task's work directory, reached only through the verifiers runtime.

Every operation is one `runtime.run` of a short bash script (or `runtime.write` for file bytes), so the tools behave
the same on the subprocess runtime (a host directory) and in a docker or prime box. The box needs bash, GNU coreutils
(`timeout`, `realpath`, `head`, `tail`, `base64`), GNU `find` and `grep`, and `awk`; `probe()` reports what is missing.

Shell commands run under `timeout`, which puts the command in a process group of its own and signals the whole group
when the time is up (TERM, then KILL five seconds later), so background children die with it. Every process the
workspace starts is tagged as the box's (`composer_prime.process.reaper.box_argv`); `reap()` kills all of them,
wherever they went (`setsid`, `nohup`, double forks), and the harness calls it when the rollout ends, cancelled or
not. When the task opened a PID namespace for the rollout (`COMPOSER_PIDNS` in the runtime's environment,
`composer_prime.process.pidns`), every command runs inside it (`nsenter`), so the grader can kill everything the agent started, tags shed or not.
Output is capped while the command runs: it flows through a pipe into `tee`, which keeps the first half of the cap
(`dd`), the last half (`tail -c`) and the byte count, in files unlinked as soon as they are opened, so a command
printing gigabytes holds at most the cap on disk and leaves no file behind however it ends (a timeout, a cancelled
rollout). Background processes that still hold the output when the command exits get one more second; then what
was captured so far is returned with a note, and the capture keeps draining their output until they exit or the
box is reaped (so they never block or die on a closed pipe). The script's own messages (bash reporting the killed
`timeout`) are discarded. On the subprocess runtime, which hands every process the worker's environment, a command
sees only `HOST_ENV_ALLOWED` (plus `LC_*`), the task's runtime variables and the harness's `env`.

Paths are normalised on the host (no absolute paths outside the work directory, no `..` out of it) and checked again
in the box with `realpath`, which catches symlinks pointing outside.

Writes (`create`, `str_replace`) do not trust that check, since a process in the box can flip a symlink between a
check and a write: the bytes are staged under a fresh random name at the top of the work directory, and a script
enters the target's directories one `cd -P` at a time, checking after each that it is still inside, then renames
the staged file into place (a rename replaces a symlink at the last component, it does not follow it). What this
guarantees: a write never goes through a symlink that points outside, whenever it was made. What it does not:
a directory that is *renamed* to outside the box while the script stands in it (a rename, not a symlink) still
receives the write; reads (`view`, `search`, the read half of `str_replace`) check and then read, so a flipped
symlink can make them read a file outside. On the subprocess runtime the agent's `bash` runs with the worker's
rights anyway, so there these checks stop mistakes, not an adversary; in a container, outside the work directory is
still inside the box. A write cut off mid-way (a cancelled rollout) can leave its staged `.composer-agent-*.tmp`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from verifiers.v1.runtimes import ProgramResult, Runtime

from composer_agent.text import PathEscape, normalize_path
from composer_prime.process.pidns import JAIL_VAR, NS_VAR, enter_argv
from composer_prime.process.reaper import BOX_VAR, box_argv, new_token, reap_box

logger = logging.getLogger(__name__)

EXIT_ESCAPE = 3
EXIT_MISSING = 4
EXIT_BAD_REQUEST = 5
EXIT_UNSUPPORTED = 6

KILL_GRACE_S = 5
"""Seconds between TERM and KILL for a command that outlives its timeout."""

BACKSTOP_S = 30.0
"""Extra seconds the host waits for a runtime call past its own timeout before abandoning it."""


HOST_ENV_ALLOWED = (
    *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM"),
    *("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "SSL_CERT_FILE", "SSL_CERT_DIR"),
)
"""Host variables a command on the subprocess runtime keeps (plus `LC_*`): locations, locale and settings that hold
no secret. Everything else of the worker's environment (credentials under any name, proxies with passwords) stays
out of the agent's shell; `forward_env` passes more by name."""

REQUIRED_PROGRAMS = (
    "timeout",
    "realpath",
    "head",
    "tail",
    "tee",
    "dd",
    "base64",
    "find",
    "awk",
    "grep",
    "sort",
    "wc",
    "env",
)

_PRELUDE = r"""
cap() {  # print file $1, keeping its head and tail within $2 bytes
  size=$(wc -c < "$1")
  if [ "$size" -gt "$2" ]; then
    half=$(($2 / 2))
    head -c "$half" "$1"
    printf '\n[... %d bytes truncated ...]\n' $((size - 2 * half))
    tail -c "$half" "$1"
  else
    cat "$1"
  fi
}
inside() {  # exit 3 unless $1 resolves (symlinks followed) inside the work directory
  both=$(realpath -m -- . "$1") || exit 2
  root=${both%%$'\n'*}; resolved=${both#*$'\n'}
  case "$resolved" in
    "$root"|"$root"/*) ;;
    *) echo "path '$1' resolves to $resolved, outside the work directory"; exit 3 ;;
  esac
}
scratch() {  # a private scratch file, created without a process (noclobber opens it O_EXCL), removed at exit
  s="${TMPDIR:-/tmp}/composer-agent.$$.$RANDOM$RANDOM"
  set -C; : > "$s" || { echo "cannot create a scratch file in ${TMPDIR:-/tmp}"; exit 125; }; set +C
  trap 'rm -f "$s" "$s.2"' EXIT
}
"""

_PROBE = r"""
pwd -L; pwd -P
for p in "$@"; do command -v "$p" >/dev/null 2>&1 || echo "missing $p"; done
"""

_SHELL = r"""
exec 2>/dev/null  # this script's own messages (e.g. bash reporting the killed `timeout`) are not the command's output
d=$(mktemp -d "${TMPDIR:-/tmp}/composer-agent.XXXXXX") || { echo "cannot create a scratch directory in ${TMPDIR:-/tmp}"; exit 125; }
exec 3>"$d/head" 4>"$d/tail" 5>"$d/size"
rm -rf "$d"  # unlinked while open: nothing is left behind, however this script ends
half=$(($4 / 2))
keep=()  # the environment the command gets: every variable, or only the allow-listed names in $5
if [ "$5" = "*" ]; then keep=($(compgen -e)); else
  for n in $(compgen -e); do
    case " $5 " in *" $n "*) keep+=("$n") ;; *) case $n in LC_*) keep+=("$n") ;; esac ;; esac
  done
fi
envs=(); for n in "${keep[@]}"; do envs+=("$n=${!n}"); done
# The capture: the first and last $half bytes and the byte count, kept while the command runs (memory and disk
# bounded by $4 bytes).
# (`dd bs=1` passes the head on as it arrives, where `head -c` would wait for all of it.)
exec 6> >(exec >/dev/null; tee -p >(dd bs=1 count="$half" status=none >&3) >(wc -c >&5) | tail -c "$half" >&4)
capture=$!
timeout -k "$2" "$1" env -i "${envs[@]}" bash -c "$3" </dev/null >&6 2>&6
rc=$?
exec 6>&-
for ((i = 0; i < 100; i++)); do kill -0 "$capture" 2>/dev/null || break; sleep 0.01; done
size=
if ! kill -0 "$capture" 2>/dev/null; then
  for ((i = 0; i < 100; i++)); do read -r size < /dev/fd/5; [ -n "$size" ] && break; sleep 0.01; done
fi
if [ -z "$size" ]; then
  cat /dev/fd/3
  printf '\n[... background processes still hold the output; what they write is not shown ...]\n'
elif [ "$size" -le "$half" ]; then
  cat /dev/fd/3
elif [ "$size" -le $((2 * half)) ]; then
  cat /dev/fd/3; tail -c $((size - half)) /dev/fd/4
else
  cat /dev/fd/3; printf '\n[... %d bytes truncated ...]\n' $((size - 2 * half)); cat /dev/fd/4
fi
exit $rc
"""

_KIND = r"""
inside "$1"
if [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then echo file
elif [ -e "$1" ]; then echo other; else echo missing; fi
"""

_PLACE = r"""
# Move the staged file $1 (top level of the work directory) to $2 without following a symlink after checking it:
# walk $2's directories one `cd -P` at a time, checking each landing place is still inside, then rename.
root=$(pwd -P); staged="$root/$1"
fail() { rm -f -- "$staged"; echo "$2"; exit "$1"; }
dir=${2%/*}; name=${2##*/}; [ "$dir" = "$2" ] && dir=.
case "$name" in ""|.|..) fail 5 "$2 is not a file path" ;; esac
IFS=/ read -ra parts <<< "$dir"
for c in "${parts[@]}"; do
  case "$c" in ""|.) continue ;; ..) fail 3 "path '$2' leaves the work directory" ;; esac
  [ -e "$c" ] || [ -L "$c" ] || mkdir -- "$c" 2>/dev/null || [ -d "$c" ] || fail 1 "cannot create directory $c"
  cd -P -- "$c" 2>/dev/null || fail 1 "cannot enter $c (not a directory?)"
  here=$(pwd -P)
  case "$here" in "$root"/*) ;; *) fail 3 "path '$2' resolves to $here, outside the work directory" ;; esac
done
[ -d "$name" ] && [ ! -L "$name" ] && fail 6 "$2 is a directory"
[ -f "$name" ] && [ ! -L "$name" ] && chmod --reference="$name" -- "$staged" 2>/dev/null
mv -fT -- "$staged" "$name" || fail 1 "cannot write $2"
"""

_READ = r"""
inside "$1"
[ -f "$1" ] || { if [ -e "$1" ]; then echo "$1 is not a regular file"; else echo "no such file: $1"; fi; exit 4; }
size=$(wc -c < "$1")
[ "$size" -le "$2" ] || { echo "$1 is $size bytes, over the $2 byte limit for edits"; exit 6; }
base64 -- "$1"
"""

_VIEW = r"""
inside "$1"
scratch
if [ -d "$1" ]; then
  find "$1" -mindepth 1 -maxdepth 2 -not -path '*/.git/*' -not -path '*/node_modules/*' -not -path '*/__pycache__*' \
    -printf '%y %P\n' 2>/dev/null | sort -k2 > "$s"
  n=$(wc -l < "$s")
  echo "# directory $1 ($n entries to depth 2; d = directory, f = file, l = link)"
  head -n "$5" "$s"
  [ "$n" -gt "$5" ] && echo "[... $((n - $5)) more entries; view a subdirectory ...]"
  exit 0
fi
[ -e "$1" ] || { echo "no such file or directory: $1"; exit 4; }
[ -f "$1" ] || { echo "$1 is not a regular file"; exit 6; }
if LC_ALL=C grep -qaP '\x00' -- "$1"; then echo "$1 is a binary file; not shown"; exit 6; fi
# One pass: the range goes to the scratch file, the header (which needs the line count) to stdout at the end.
awk -v s="$2" -v e="$3" -v out="$s" -v f="$1" '
  NR >= s && (e == 0 || NR <= e) { printf "%6d\t%s\n", NR, $0 > out }
  END {
    if (NR > 0 && s > NR) { printf "start_line %d is past the end of %s (%d lines)\n", s, f, NR; exit 5 }
    last = (e == 0 || e > NR) ? NR : e
    printf "# %s: lines %d-%d of %d\n", f, s, last, NR
  }' "$1" || exit $?
cap "$s" "$4"
"""

_SEARCH = r"""
inside "$2"
[ -e "$2" ] || { echo "no such file or directory: $2"; exit 4; }
scratch
grep -rnIE --exclude-dir=.git --exclude-dir=node_modules -e "$1" -- "$2" > "$s" 2> "$s.2"
rc=$?
n=$(wc -l < "$s")
if [ "$n" -eq 0 ]; then
  if [ "$rc" -ge 2 ]; then echo "grep failed: $(head -c 500 "$s.2")"; exit 5; fi
  echo "no matches for /$1/ under $2"; exit 0
fi
echo "# $n matching lines for /$1/ under $2"
head -n "$3" "$s" | sed 's|^\./||' | cut -c1-400 > "$s.2"
cap "$s.2" "$4"
[ "$n" -gt "$3" ] && echo "[... $((n - $3)) more matching lines not shown; narrow the pattern or the path ...]"
exit 0
"""


@dataclass(frozen=True)
class ShellResult:
    output: str
    exit_code: int
    timed_out: bool
    elapsed_s: float


@dataclass(frozen=True)
class ScriptResult:
    output: str
    exit_code: int


class Workspace:
    """Tool operations on the task's work directory (the runtime's working directory)."""

    def __init__(self, runtime: Runtime, env: dict[str, str], *, output_cap_bytes: int, op_timeout_s: float):
        self.runtime = runtime
        self.env = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", **env}
        self.output_cap_bytes = output_cap_bytes
        self.op_timeout_s = op_timeout_s
        self.roots: tuple[str, ...] = ()
        self.missing: list[str] = []
        self.token = new_token()
        """The box tag of every process this workspace starts (see composer_prime.process.reaper)."""

    async def probe(self) -> None:
        """Learn the work directory's absolute spellings and which required programs the box lacks."""
        result = await self._run(["bash", "-c", _PROBE, "composer-agent", *REQUIRED_PROGRAMS], self.op_timeout_s)
        lines = result.stdout.splitlines()
        self.roots = tuple(dict.fromkeys(line for line in lines[:2] if line.startswith("/")))
        self.missing = [line.split(" ", 1)[1] for line in lines[2:] if line.startswith("missing ")]

    def resolve(self, path: str) -> str:
        """The work-directory-relative form of a model-given path; PathEscape when it leaves the directory."""
        rel = normalize_path(path, self.roots)
        # A leading dash would read as an option to find/awk/grep in the scripts.
        return f"./{rel}" if rel.startswith("-") else rel

    async def shell(self, command: str, timeout_s: int) -> ShellResult:
        start = time.monotonic()
        args = [str(timeout_s), str(KILL_GRACE_S), command, str(self.output_cap_bytes), self._env_names()]
        argv = ["bash", "-c", _PRELUDE + _SHELL, "composer-agent", *args]
        try:
            result = await self._run(argv, timeout_s + KILL_GRACE_S + BACKSTOP_S)
        except TimeoutError:
            # The runtime did not return long past the command's own deadline: end everything the box runs.
            await self.reap()
            return ShellResult("", -1, True, time.monotonic() - start)
        elapsed = time.monotonic() - start
        # `timeout` exits 124 after TERM; when the group had to be KILLed the shell reports 137 (or -9 through a
        # runtime that returns the signal). Neither can come from a command that finished before its deadline.
        timed_out = result.exit_code in (124, 137, -9) and elapsed >= timeout_s
        return ShellResult(result.stdout + result.stderr, result.exit_code, timed_out, elapsed)

    def _env_names(self) -> str:
        """The variables a shell command may see: on the subprocess runtime, which hands every process the worker's
        own environment (minus names containing API_KEY), only the allow-list, the task's runtime variables and the
        harness's `env`; elsewhere ("*") the box's whole environment, which holds nothing of the host's."""
        if getattr(self.runtime, "type", None) != "subprocess":
            return "*"
        return " ".join(sorted({*HOST_ENV_ALLOWED, *getattr(self.runtime, "env", {}), *self.env, BOX_VAR}))

    async def reap(self) -> int:
        """Kill every process this workspace's commands started, wherever they went; returns how many (0 when the
        box is gone or the reaper failed, which is logged)."""
        workdir = self.roots[-1] if self.roots else str(getattr(self.runtime, "workdir", "") or "")
        if not workdir.startswith("/") or workdir == "/":
            logger.warning("composer-agent: no work directory known for the box; its processes are not reaped")
            return 0
        try:
            # Only what this workspace started: a task's service or verifiers' tool server in the same directory
            # (started without the tag) must outlive the agent, e.g. for scoring.
            return await reap_box(self.runtime, workdir, self.token, by_workdir=False)
        except Exception as e:  # noqa: BLE001 - the runtime may already be gone; the rollout still ends
            logger.warning("composer-agent: reaping the box's processes failed: %s", e)
            return 0

    async def kind(self, path: str) -> Literal["file", "dir", "missing", "other"]:
        result = await self.script(_KIND, path)
        if result.exit_code == EXIT_ESCAPE:
            raise PathEscape(result.output.strip())
        if result.exit_code != 0:
            raise OSError(f"cannot inspect {path!r}: {result.output.strip()}")
        kind = result.output.strip().splitlines()[-1] if result.output.strip() else ""
        if kind not in ("file", "dir", "missing", "other"):
            raise OSError(f"cannot inspect {path!r}: unexpected answer {kind!r}")
        return kind  # type: ignore[return-value]

    async def view(self, path: str, start_line: int, end_line: int, max_entries: int) -> ScriptResult:
        return await self.script(
            _VIEW, path, str(start_line), str(end_line), str(self.output_cap_bytes), str(max_entries)
        )

    async def search(self, pattern: str, path: str, max_matches: int) -> ScriptResult:
        return await self.script(_SEARCH, pattern, path, str(max_matches), str(self.output_cap_bytes))

    async def read(self, path: str, max_bytes: int) -> bytes:
        """A regular file's bytes, after the same escape check; OSError when it is missing, not a file or too big."""
        result = await self._run(
            ["bash", "-c", _PRELUDE + _READ, "composer-agent", path, str(max_bytes)], self.op_timeout_s
        )
        if result.exit_code == EXIT_ESCAPE:
            raise PathEscape(result.stdout.strip())
        if result.exit_code != 0:
            raise OSError((result.stdout + result.stderr).strip() or f"cannot read {path!r}")
        return base64.b64decode(result.stdout)

    async def write(self, path: str, data: bytes) -> None:
        """Write `data` to `path` (parents created): staged at the top of the work directory, then renamed into place
        by a script that checks every directory it enters (see `_PLACE`); PathEscape or OSError when refused."""
        staged = f".composer-agent-{uuid.uuid4().hex}.tmp"
        await asyncio.wait_for(self.runtime.write(staged, data), self.op_timeout_s)
        result = await self.script(_PLACE, staged, path)
        if result.exit_code == EXIT_ESCAPE:
            raise PathEscape(result.output.strip())
        if result.exit_code != 0:
            raise OSError(result.output.strip() or f"cannot write {path!r}")

    async def script(self, body: str, *args: str) -> ScriptResult:
        result = await self._run(["bash", "-c", _PRELUDE + body, "composer-agent", *args], self.op_timeout_s)
        return ScriptResult(result.stdout + result.stderr, result.exit_code)

    async def _run(self, argv: list[str], timeout_s: float) -> ProgramResult:
        argv = box_argv(argv, self.token)
        env = getattr(self.runtime, "env", None) or {}
        holder = env.get(NS_VAR)
        if holder:
            argv = enter_argv(argv, holder, env.get(JAIL_VAR))
        return await asyncio.wait_for(self.runtime.run(argv, dict(self.env)), timeout_s)
