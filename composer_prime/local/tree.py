"""A private copy of a PRIME-RL tree at 559b447 with the CPU patch applied (`prime_rl_cpu.patch`).

The smoke never writes into the tree the user names: it copies PRIME-RL's sources (`src/`, `packages/`, `configs/`,
`pyproject.toml`, `deps/verifiers`) into its cache, applies the patch with `git apply`, and runs from there. A tree
the patch does not apply to is refused with the commit it needs. The copy is reused while the source tree's commit
and the patch are unchanged (keyed by the hash of both; a `.complete` file written last marks a finished copy).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

PINNED_COMMIT = "559b447"
PATCH = Path(__file__).with_name("prime_rl_cpu.patch")
COPIED = ("src", "packages", "configs", "pyproject.toml", "README.md", "LICENSE", "deps/verifiers")
FETCH = (
    "git clone https://github.com/PrimeIntellect-ai/prime-rl ../prime-rl && git -C ../prime-rl checkout "
    f"{PINNED_COMMIT} && git -C ../prime-rl submodule update --init deps/verifiers"
)
"""How a user gets the tree `--prime-rl` names."""


class TreeError(ValueError):
    """The PRIME-RL tree cannot be used; the message names the path and the fix."""


def source_commit(tree: Path) -> str | None:
    """The checkout's HEAD, or None for a source tree without git metadata (a release tarball)."""
    if not (tree / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else None


def check_tree(tree: Path) -> None:
    """Refuse a path that is not a PRIME-RL tree at the pinned commit with its verifiers snapshot."""
    if not (tree / "src" / "prime_rl" / "entrypoints" / "rl.py").is_file():
        raise TreeError(
            f"--prime-rl = {str(tree)!r} is not a PRIME-RL source tree (no src/prime_rl/entrypoints/rl.py);"
            f" get one with: {FETCH}"
        )
    commit = source_commit(tree)
    if commit is not None and not commit.startswith(PINNED_COMMIT):
        raise TreeError(
            f"--prime-rl = {str(tree)!r} is at commit {commit[:7]}; composer-prime runs PRIME-RL at "
            f"{PINNED_COMMIT}: git -C {tree} checkout {PINNED_COMMIT}"
        )
    if not (tree / "deps" / "verifiers" / "pyproject.toml").is_file():
        raise TreeError(
            f"--prime-rl = {str(tree)!r} has no deps/verifiers (PRIME-RL's pinned verifiers snapshot, a "
            f"git submodule): git -C {tree} submodule update --init deps/verifiers"
        )


def fingerprint(tree: Path) -> str:
    """The hash of the patch and of every file the copy takes from the tree: an edit anywhere makes a new copy."""
    digest = hashlib.sha256(PATCH.read_bytes())
    for rel in COPIED:
        top = tree / rel
        files = sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top] if top.is_file() else []
        for path in files:
            if ".git" in path.parts or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def patched_files() -> list[str]:
    """The paths (relative to the tree) the patch changes or adds."""
    names = []
    for line in PATCH.read_text().splitlines():
        if line.startswith("+++ b/"):
            names.append(line[len("+++ b/") :])
    return names


def private_copy(tree: Path, cache: Path) -> Path:
    """The patched copy of `tree` under `cache` (made once per fingerprint); raises `TreeError`."""
    check_tree(tree)
    key = fingerprint(tree)
    dest = cache / f"prime-rl-{PINNED_COMMIT}-{key}"
    marker = dest / ".complete"
    if marker.is_file():
        return dest
    if dest.exists():
        shutil.rmtree(dest)  # an interrupted copy: never reused
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc")
    for rel in COPIED:
        src = tree / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=ignore, symlinks=True)
        elif src.is_file():
            shutil.copy2(src, dest / rel)
    # git apply inside another repository's work tree (a cache under a clone, a $HOME kept in git) skips the paths
    # outside that repository's subfolder and exits 0: the copy is kept out of any repository above it, and the
    # result is checked by applying the patch in reverse.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent)}
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", str(PATCH)],
        cwd=dest,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if done.returncode == 0:
        done = subprocess.run(
            ["git", "apply", "--check", "--reverse", str(PATCH)],
            cwd=dest,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    if done.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise TreeError(
            f"--prime-rl = {str(tree)!r}: the CPU patch does not apply ({done.stderr.strip()[:400]}); "
            f"the tree must be PRIME-RL at commit {PINNED_COMMIT}"
        )
    marker.write_text(f"{key}\n")
    return dest
