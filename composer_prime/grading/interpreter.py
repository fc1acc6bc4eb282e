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
import secrets
from pathlib import Path

import verifiers.v1 as vf

PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli")
"""Top-level modules grading imports (pytest and its dependencies); those not installed are recorded as absent."""

PROBE = """
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bootstrap
sys.path.pop(0)
bootstrap.add_site_packages()
found = {}
for name in json.loads(sys.argv[1]):
    spec = importlib.util.find_spec(name)
    origin = spec.origin if spec is not None else None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    found[name] = locations[0] if locations else origin
print(json.dumps({"packages": found, "path": sys.path, "executable": os.path.realpath(sys.executable)}))
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
    """`{package or "executable" or "pth:<dir>": digest}` of the grading interpreter, taken in the box."""
    scratch = f"/tmp/composer-prime-probe-{secrets.token_hex(12)}"
    await runtime.write(f"{scratch}/bootstrap.py", (Path(__file__).with_name("bootstrap.py")).read_bytes())
    await runtime.write(f"{scratch}/probe.py", PROBE.encode())
    try:
        probe = await runtime.run([python, "-I", "-S", "-B", f"{scratch}/probe.py", json.dumps(PACKAGES)], {})
    finally:
        await runtime.run(["rm", "-rf", "--", scratch], {})
    if probe.exit_code != 0:
        return {"probe": f"failed (exit {probe.exit_code}): {(probe.stderr or '')[-200:]}"}
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    names = [*PACKAGES, "executable"]
    targets = [found["packages"].get(name) or "/nonexistent" for name in PACKAGES] + [found["executable"]]
    for directory in found["path"]:
        if directory.rstrip("/").endswith("-packages"):
            names.append(f"pth:{directory}")
            targets.append(directory)
    digests = await runtime.run(["bash", "-c", HASH, "composer-prime-hash", *targets], {})
    lines = (digests.stdout or "").splitlines()
    if digests.exit_code != 0 or len(lines) != len(names):
        return {"hash": f"failed (exit {digests.exit_code})"}
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
