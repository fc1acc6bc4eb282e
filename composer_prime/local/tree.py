"""A private copy of a PRIME-RL tree at 559b447 with the CPU patch applied (`prime_rl_cpu.patch`).

The smoke never writes into the tree the user names: it copies PRIME-RL's sources (`src/`, `packages/`, `configs/`,
`pyproject.toml`, `deps/verifiers`) into its cache, applies the patch with `git apply`, and runs from there. A tree
the patch does not apply to is refused with the commit it needs. A checkout's commit is read from git; a tree without
`.git` (a release tarball, a vendored copy) is checked by content instead: every file the patch changes and every
module composer-prime's seam patches or imports must have the blob id it has at 559b447 (`PINNED_BLOBS`, git's own
object ids: `git -C PATH ls-tree -r 559b447` lists them), and the first that differs is named. The copy is reused while the source tree's commit
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
HTTPS_SUBMODULES = "-c url.https://github.com/.insteadOf=git@github.com:"
"""PRIME-RL's `.gitmodules` names its submodules by SSH (`git@github.com:`), which needs a GitHub key; this rewrite,
passed to `git` (and by git to the clones it starts), fetches them over HTTPS without credentials."""
FETCH = (
    "git clone https://github.com/PrimeIntellect-ai/prime-rl ../prime-rl && git -C ../prime-rl checkout "
    f"{PINNED_COMMIT} && git -C ../prime-rl {HTTPS_SUBMODULES} submodule update --init deps/verifiers"
)
"""How a user gets the tree `--prime-rl` names."""
PINNED_BLOBS = {
    # the files the CPU patch changes (its `index` lines start with these ids)
    "packages/prime-rl-configs/src/prime_rl/configs/trainer.py": "d54bdd7bb3d534c60c19ef3f0d1bcd7e0a3d623f",
    "src/prime_rl/inference/patches.py": "51c35c257eac8dce1c4439106d75e2860e32ccf4",
    "src/prime_rl/inference/vllm/server.py": "728574aba9e425aadbcc43a30da19bcaf9ec8ca5",
    "src/prime_rl/trainer/model.py": "121ba9cb8828cbb57a24797544fce5699030d68b",
    "src/prime_rl/trainer/parallel_dims.py": "ca309830695ea810d98bf78eaf184c22aaa97f5c",
    "src/prime_rl/trainer/perf.py": "cfbd5b22571855fe307147a49fffa0a65d5c3d97",
    "src/prime_rl/trainer/rl/train.py": "c04bc7fe0b09e99f20b06434fd45a068c017915f",
    "src/prime_rl/trainer/utils.py": "47ab970102aeb7ad0861c459d179ddec81dc1c78",
    # the modules the seam patches (`composer_prime.seam.hook.TARGETS`) and imports (`seam/algorithm.py`)
    "packages/prime-rl-configs/src/prime_rl/configs/algorithm.py": "739cd6e4bb7cfe76ba43bb0963f714dc26ba9c31",
    "packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py": "27fa6d6188e0d4cf48c8401b90c9698eb9d3aa4c",
    "packages/prime-rl-configs/src/prime_rl/configs/rl.py": "f8de4f7ea1b00ec0ed48c61d598fa53f4823188a",
    "src/prime_rl/orchestrator/algo/__init__.py": "2e9736c718d4cfcd06cf7afdac3a587ce9fe1dd3",
    "src/prime_rl/orchestrator/algo/base.py": "9bc9e76cf409343affcf1c44246ca524570d7854",
    "src/prime_rl/orchestrator/algo/routing.py": "c7e569b4516ae24124d62dc062149076276cefe4",
    "src/prime_rl/orchestrator/train_sink.py": "4f85cd4a1dbf460ef5659f24077cfb4ba0440a7d",
    "src/prime_rl/orchestrator/train_source.py": "9bf58e661d5666a15de47e88a9531bad3d4235b7",
}
"""Relative path -> git blob id at 559b447 of every file the CPU patch or the seam depends on."""


class TreeError(ValueError):
    """The PRIME-RL tree cannot be used; the message names the path and the fix."""


def source_commit(tree: Path) -> str | None:
    """The checkout's HEAD, or None for a source tree without git metadata (a release tarball)."""
    if not (tree / ".git").exists():
        return None
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else None


def blob_id(path: Path) -> str:
    """Git's object id of the file's bytes (`git hash-object`)."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_content(tree: Path) -> None:
    """Refuse a tree without git metadata whose patched or seamed files are not PRIME-RL 559b447's."""
    for rel, expected in sorted(PINNED_BLOBS.items()):
        path = tree / rel
        if not path.is_file():
            found = "is missing"
        elif (actual := blob_id(path)) != expected:
            found = f"differs from PRIME-RL {PINNED_COMMIT}'s (blob {actual[:10]}, expected {expected[:10]})"
        else:
            continue
        raise TreeError(
            f"--prime-rl = {str(tree)!r} has no git metadata, so its commit is checked by content: {rel} {found}; "
            f"the CPU patch and composer-prime's seam are written against that file at {PINNED_COMMIT}. Use "
            f"PRIME-RL at {PINNED_COMMIT}, unchanged: {FETCH}"
        )


def check_tree(tree: Path) -> None:
    """Refuse a path that is not a PRIME-RL tree at the pinned commit with its verifiers snapshot."""
    if not (tree / "src" / "prime_rl" / "entrypoints" / "rl.py").is_file():
        raise TreeError(
            f"--prime-rl = {str(tree)!r} is not a PRIME-RL source tree (no src/prime_rl/entrypoints/rl.py);"
            f" get one with: {FETCH}"
        )
    commit = source_commit(tree)
    if commit is None:
        check_content(tree)
    elif not commit.startswith(PINNED_COMMIT):
        raise TreeError(
            f"--prime-rl = {str(tree)!r} is at commit {commit[:7]}; composer-prime runs PRIME-RL at "
            f"{PINNED_COMMIT}: git -C {tree} checkout {PINNED_COMMIT}"
        )
    if not (tree / "deps" / "verifiers" / "pyproject.toml").is_file():
        raise TreeError(
            f"--prime-rl = {str(tree)!r} has no deps/verifiers (PRIME-RL's pinned verifiers snapshot, a "
            f"git submodule): git -C {tree} {HTTPS_SUBMODULES} submodule update --init deps/verifiers"
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
