"""The grading interpreter, hash-checked: what it imports for grading must be what it was before the agent ran.

The launcher runs the box's interpreter with `-I -S`, so nothing of the work tree and no start-up hook reaches it;
but its own site-packages are files the agent may write (a shared venv on the subprocess runtime): a copy of
`iniconfig` with a forger appended is imported by pytest itself. At task setup, before the agent starts,
`fingerprint` records where the interpreter's grading packages (`PACKAGES`) are found, with the launcher's own
path logic (`bootstrap.add_site_packages`), and a sha256 over every file under each of them, its `.pth` files and the
interpreter's executable. At grading the fingerprint is taken again, beside the suite run, once every process that
ran the candidate before it is dead (`grader.grade`'s `check`); any difference voids the grade (`changes`). It is
never cached: a cache keyed on path, size and mtime is one the agent can satisfy.

The digests are computed by `sha256sum` in the box. On the subprocess runtime that is the host's, which the agent
could also rewrite with the worker's privileges; an image runtime, whose interpreter the agent cannot write, is the
real boundary (docs/grading.md, threat model).
"""

from __future__ import annotations

import json
from pathlib import Path

import verifiers.v1 as vf

PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli")
"""Top-level modules grading imports (pytest and its dependencies); those not installed are recorded as absent."""

PROBE = """
import importlib.util, json, os, subprocess, sys, types
bootstrap = types.ModuleType("bootstrap")
exec(compile(sys.argv[1], "bootstrap.py", "exec"), bootstrap.__dict__)
bootstrap.add_site_packages()
found = {}
for name in json.loads(sys.argv[2]):
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec is not None else None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    found[name] = locations[0] if locations else origin
executable = os.path.realpath(sys.executable)
targets = [found.get(name) or "/nonexistent" for name in json.loads(sys.argv[2])] + [executable]
sites = [d for d in sys.path if d.rstrip("/").endswith("-packages")]
digests = subprocess.run(["bash", "-c", sys.argv[3], "composer-prime-hash", *targets, *sites], capture_output=True)
print(json.dumps({"packages": found, "sites": sites, "executable": executable, "exit": digests.returncode,
                  "digests": digests.stdout.decode("utf-8", "replace").splitlines()}))
"""
HASH = r"""
for target in "$@"; do
  case "$target" in
    *-packages)  # a site-packages folder: its .pth files only (hashing all of it would take seconds)
      find "$target" -maxdepth 1 -name '*.pth' -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum ;;
    *)
      if [ -d "$target" ]; then
        find "$target" -type f ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum
      elif [ -f "$target" ]; then sha256sum < "$target"; else echo absent; fi ;;
  esac
done
"""


async def fingerprint(runtime: vf.Runtime, python: str) -> dict[str, str]:
    """`{package or "executable" or "pth:<dir>": digest}` of the grading interpreter, taken in the box by one command:
    the probe (the launcher's own path logic, from `bootstrap.py`'s source passed as an argument) finds the
    packages, then runs `HASH` over them with the box's `bash` and `sha256sum`."""
    bootstrap = Path(__file__).with_name("bootstrap.py").read_text()
    probe = await runtime.run([python, "-I", "-S", "-B", "-c", PROBE, bootstrap, json.dumps(PACKAGES), HASH], {})
    if probe.exit_code != 0:
        return {"probe": f"failed (exit {probe.exit_code}): {(probe.stderr or '')[-200:]}"}
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    names = [*PACKAGES, "executable", *(f"pth:{directory}" for directory in found["sites"])]
    targets = [found["packages"].get(name) or "/nonexistent" for name in PACKAGES]
    targets += [found["executable"], *found["sites"]]
    lines = found["digests"]
    if found["exit"] != 0 or len(lines) != len(names):
        return {"hash": f"failed (exit {found['exit']})"}
    return {name: f"{where}@{line.split()[0]}" for name, where, line in zip(names, targets, lines, strict=True)}


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One void reason per grading package (or `.pth` set, or executable) that differs from the setup fingerprint."""
    return [
        f"the grading interpreter changed since setup: {name} ({before.get(name, 'absent')} -> {after.get(name, 'absent')})"[
            :300
        ]
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    ]
