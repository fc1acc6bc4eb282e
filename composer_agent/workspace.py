"""The task's work directory, reached only through the verifiers runtime.

Every operation is one `runtime.run` of a short bash script (or `runtime.read`/`runtime.write` for file bytes), so
the tools behave the same on the subprocess runtime (a host directory) and in a docker or prime box. The box needs
bash and GNU coreutils (`timeout`, `realpath`, `mktemp`, `head`, `tail`), `find`, `awk` and `grep`; `probe()` reports
any that are missing.

Shell commands run under `timeout`, which puts the command in a process group of its own and signals the whole
group when the time is up (TERM, then KILL five seconds later), so background children die with it. Output goes to
a temporary file inside the box and only its head and tail cross the runtime boundary, so a command printing
gigabytes costs the host nothing.

Paths are normalised on the host (no absolute paths outside the work directory, no `..` out of it) and checked
again in the box with `realpath`, which catches symlinks pointing outside.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal

from verifiers.v1.runtimes import ProgramResult, Runtime

from composer_agent.text import PathEscape, normalize_path

EXIT_ESCAPE = 3
EXIT_MISSING = 4
EXIT_BAD_REQUEST = 5
EXIT_UNSUPPORTED = 6

KILL_GRACE_S = 5
"""Seconds between TERM and KILL for a command that outlives its timeout."""

BACKSTOP_S = 30.0
"""Extra seconds the host waits for a runtime call past its own timeout before abandoning it."""

REQUIRED_PROGRAMS = ("timeout", "realpath", "mktemp", "head", "tail", "find", "awk", "grep", "sort", "wc")

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
inside() {  # exit EXIT_ESCAPE unless $1 resolves (symlinks followed) inside the work directory
  root=$(pwd -P)
  resolved=$(realpath -m -- "$1") || exit 2
  case "$resolved" in
    "$root"|"$root"/*) ;;
    *) echo "path '$1' resolves to $resolved, outside the work directory"; exit 3 ;;
  esac
}
scratch=$(mktemp "${TMPDIR:-/tmp}/composer-agent.XXXXXX") || { echo "mktemp failed"; exit 125; }
trap 'rm -f "$scratch" "$scratch.err"' EXIT
"""

_PROBE = r"""
pwd -L; pwd -P
for p in "$@"; do command -v "$p" >/dev/null 2>&1 || echo "missing $p"; done
"""

_SHELL = r"""
timeout -k "$2" "$1" bash -c "$3" </dev/null >"$scratch" 2>&1
rc=$?
cap "$scratch" "$4"
exit $rc
"""

_KIND = r"""
inside "$1"
if [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then echo file; elif [ -e "$1" ]; then echo other; else echo missing; fi
"""

_VIEW = r"""
inside "$1"
if [ -d "$1" ]; then
  find "$1" -mindepth 1 -maxdepth 2 -not -path '*/.git/*' -not -path '*/node_modules/*' -not -path '*/__pycache__*' \
    -printf '%y %P\n' 2>/dev/null | sort -k2 > "$scratch"
  n=$(wc -l < "$scratch")
  echo "# directory $1 ($n entries to depth 2; d = directory, f = file, l = link)"
  head -n "$5" "$scratch"
  [ "$n" -gt "$5" ] && echo "[... $((n - $5)) more entries; view a subdirectory ...]"
  exit 0
fi
[ -e "$1" ] || { echo "no such file or directory: $1"; exit 4; }
[ -f "$1" ] || { echo "$1 is not a regular file"; exit 6; }
if [ "$(head -c 8192 "$1" | tr -d -c '\000' | wc -c)" -gt 0 ]; then
  echo "$1 is a binary file ($(wc -c < "$1") bytes); not shown"; exit 6
fi
total=$(awk 'END {print NR}' "$1")
start=$2; end=$3
[ "$end" -eq 0 ] || [ "$end" -gt "$total" ] && end=$total
if [ "$total" -gt 0 ] && [ "$start" -gt "$total" ]; then
  echo "start_line $start is past the end of $1 ($total lines)"; exit 5
fi
echo "# $1: lines $start-$end of $total"
awk -v s="$start" -v e="$end" 'NR >= s && NR <= e {printf "%6d\t%s\n", NR, $0}' "$1" > "$scratch"
cap "$scratch" "$4"
"""

_SEARCH = r"""
inside "$2"
[ -e "$2" ] || { echo "no such file or directory: $2"; exit 4; }
grep -rnIE --exclude-dir=.git --exclude-dir=node_modules -e "$1" -- "$2" > "$scratch" 2> "$scratch.err"
rc=$?
n=$(wc -l < "$scratch")
if [ "$n" -eq 0 ]; then
  if [ "$rc" -ge 2 ]; then echo "grep failed: $(head -c 500 "$scratch.err")"; exit 5; fi
  echo "no matches for /$1/ under $2"; exit 0
fi
echo "# $n matching lines for /$1/ under $2"
head -n "$3" "$scratch" | sed 's|^\./||' | cut -c1-400 > "$scratch.err"
cap "$scratch.err" "$4"
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

    async def probe(self) -> None:
        """Learn the work directory's absolute spellings and which required programs the box lacks."""
        result = await self._run(["bash", "-c", _PROBE, "composer-agent", *REQUIRED_PROGRAMS], self.op_timeout_s)
        lines = result.stdout.splitlines()
        self.roots = tuple(dict.fromkeys(line for line in lines[:2] if line.startswith("/")))
        self.missing = [line.split(" ", 1)[1] for line in lines[2:] if line.startswith("missing ")]

    def resolve(self, path: str) -> str:
        """The work-directory-relative form of a model-given path; PathEscape when it leaves the directory."""
        return normalize_path(path, self.roots)

    async def shell(self, command: str, timeout_s: int) -> ShellResult:
        start = time.monotonic()
        args = [str(timeout_s), str(KILL_GRACE_S), command, str(self.output_cap_bytes)]
        try:
            result = await self._run(
                ["bash", "-c", _PRELUDE + _SHELL, "composer-agent", *args], timeout_s + KILL_GRACE_S + BACKSTOP_S
            )
        except TimeoutError:
            return ShellResult("", -1, True, time.monotonic() - start)
        elapsed = time.monotonic() - start
        # `timeout` exits 124 after TERM; when the group had to be KILLed the shell reports 137 (or -9 through a
        # runtime that returns the signal). Neither can come from a command that finished before its deadline.
        timed_out = result.exit_code in (124, 137, -9) and elapsed >= timeout_s
        return ShellResult(result.stdout + result.stderr, result.exit_code, timed_out, elapsed)

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
        return await self.script(_VIEW, path, str(start_line), str(end_line), str(self.output_cap_bytes), str(max_entries))

    async def search(self, pattern: str, path: str, max_matches: int) -> ScriptResult:
        return await self.script(_SEARCH, pattern, path, str(max_matches), str(self.output_cap_bytes))

    async def read(self, path: str, max_bytes: int) -> bytes:
        return await asyncio.wait_for(self.runtime.read(path, max_bytes=max_bytes), self.op_timeout_s)

    async def write(self, path: str, data: bytes) -> None:
        await asyncio.wait_for(self.runtime.write(path, data), self.op_timeout_s)

    async def script(self, body: str, *args: str) -> ScriptResult:
        result = await self._run(["bash", "-c", _PRELUDE + body, "composer-agent", *args], self.op_timeout_s)
        return ScriptResult(result.stdout + result.stderr, result.exit_code)

    async def _run(self, argv: list[str], timeout_s: float) -> ProgramResult:
        return await asyncio.wait_for(self.runtime.run(argv, dict(self.env)), timeout_s)
