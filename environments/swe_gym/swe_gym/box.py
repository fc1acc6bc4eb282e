"""Commands run inside a task's box (any runtime): making its git history safe, and small helpers.

No future in the box: an agent that can reach commits after `base_commit` can read the fix (SWE-bench issue #465).
The box's repository therefore holds exactly one commit, whose tree is the work tree at `base_commit`:

- local mode clones a snapshot that never had anything else (`local.prepare_snapshot`);
- image mode squashes the image's repository in place: the image's `.git` (which may carry the full upstream
  history, tags and remotes) is moved out, a fresh repository commits the work tree as it stands at
  `base_commit`, and the old `.git` is deleted.

One commit rather than the history up to `base_commit`: it is trivially free of later objects (nothing to
audit in packs, reflogs, stashes or tags), it costs the same on every runtime (no repack of a large history per
rollout), and the agent's diff against it applies to the real `base_commit` unchanged. What the agent loses is
`git log` / `git blame` over the project's past.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import uuid
import zlib
from dataclasses import dataclass, field

import verifiers.v1 as vf

from composer_prime.grading import tree
from composer_prime.grading.pytest_config import CONFIG_NAMES

# Both box builders keep bytecode out of git's view: the agent's tools and tests write __pycache__, which must not
# reach the captured patch.
SQUASH_SCRIPT = """
set -eu
base="$1"; message="$2"
[ -d .git ] || { echo "no git repository in $(pwd)" >&2; exit 2; }
git cat-file -e "$base^{commit}" || { echo "base_commit $base is not in the image's repository" >&2; exit 2; }
[ "$(git rev-parse HEAD)" = "$base" ] || git -c advice.detachedHead=false checkout -q "$base"
date=$(git show -s --format=%cI "$base")
old=$(mktemp -d /tmp/swe-gym-old-git.XXXXXX)
mv .git "$old/"
git init -q --initial-branch=main .
cp "$old/.git/info/exclude" .git/info/exclude 2>/dev/null || true
printf '__pycache__/\n*.py[cod]\n' >> .git/info/exclude
git add -A
GIT_AUTHOR_NAME=swe-gym GIT_AUTHOR_EMAIL=swe-gym@localhost GIT_COMMITTER_NAME=swe-gym \
GIT_COMMITTER_EMAIL=swe-gym@localhost GIT_AUTHOR_DATE="$date" GIT_COMMITTER_DATE="$date" \
  git commit -q --no-verify -m "$message"
rm -rf "$old"
git rev-parse HEAD
"""

CLONE_SCRIPT = """
set -eu
git clone -q --no-hardlinks "$1" .
printf '__pycache__/\n*.py[cod]\n' >> .git/info/exclude
git remote remove origin
git reflog expire --expire=now --all
git rev-parse HEAD
"""


def _check(result: vf.ProgramResult, what: str) -> str:
    if result.exit_code != 0:
        raise vf.SandboxError(
            f"{what} failed (exit {result.exit_code}): {(result.stderr or result.stdout).strip()[-800:]}"
        )
    return (result.stdout or "").strip()


async def squash_to_base(runtime: vf.Runtime, base_commit: str, instance_id: str) -> str:
    """Replace the image's repository by a one-commit repository of the tree at `base_commit`; returns its sha."""
    message = f"{instance_id} at {base_commit}"
    result = await runtime.run(["bash", "-c", SQUASH_SCRIPT, "swe-gym-squash", base_commit, message], {})
    return _check(result, f"preparing the repository of {instance_id}").splitlines()[-1]


async def clone_snapshot(runtime: vf.Runtime, snapshot: object) -> str:
    """Clone a host-prepared snapshot into the (empty) work directory of a local box; returns the commit sha."""
    result = await runtime.run(["bash", "-c", CLONE_SCRIPT, "swe-gym-clone", str(snapshot)], {})
    return _check(result, f"cloning the snapshot {snapshot}").splitlines()[-1]


async def workdir(runtime: vf.Runtime) -> str:
    return _check(await runtime.run(["pwd", "-P"], {}), "reading the work directory")


async def head(runtime: vf.Runtime) -> str:
    return _check(await runtime.run(["git", "rev-parse", "HEAD"], {}), "reading the box's commit")


async def remove(runtime: vf.Runtime, path: str) -> None:
    with contextlib.suppress(Exception):  # cleanup of a temp file must never fail grading
        await runtime.run(["rm", "-f", path], {})


async def alive(runtime: vf.Runtime) -> bool:
    try:
        return (await runtime.run(["true"], {})).exit_code == 0
    except Exception:  # noqa: BLE001 - failing to exec at all means the box is gone
        return False


async def apply_patch(runtime: vf.Runtime, patch: str) -> str | None:
    """`git apply` a patch in the work directory; None on success, else git's complaint."""
    path = f"/tmp/swe_gym_patch_{uuid.uuid4().hex}.diff"
    await runtime.write(path, patch.encode())
    try:
        result = await runtime.run(["git", "apply", "--whitespace=nowarn", path], {})
    finally:
        await remove(runtime, path)
    if result.exit_code != 0:
        return (result.stderr or result.stdout).strip()[-800:] or f"exit {result.exit_code}"
    return None


HELD_BYTES = 128_000_000
"""Most bytes of the starting tree held on the host (files read in priority order: test files, Python, the rest)."""
HELD_FILE_BYTES = 4_000_000
"""A file larger than this is not held. The test patch's files are held whatever their size and the budget left."""
_PACK = 'tar --null --verbatim-files-from -T "$1" -cf "$2"'


@dataclass
class Baseline:
    """The box's tree before the agent ran, held in the env server's memory (never on the box, never on the trace):
    the sha256 of every file, the root pytest configuration, and the content of every file within `HELD_BYTES`."""

    files: dict[str, str]
    """Path -> sha256 of every regular file (`.git` aside)."""
    configs: dict[str, str]
    """The root pytest configuration files' text."""
    held: dict[str, bytes] = field(default_factory=dict)
    """Path -> zlib-compressed bytes of the files held."""

    def content(self, path: str) -> bytes | None:
        data = self.held.get(path)
        return None if data is None else zlib.decompress(data)


def _priority(path: str, tests: set[str]) -> tuple[int, str]:
    if path in tests or tree.is_test_path(path):
        return 0, path
    return (1 if path.endswith(".py") else 2), path


async def capture_baseline(runtime: vf.Runtime, tests: list[str] = ()) -> Baseline:
    """Before the agent runs: each file's sha256, the root pytest configuration texts, and the bytes of the tree's
    files (test files first, then Python, then the rest, within `HELD_BYTES`), packed by one `tar` in the box and
    checked against the listing on the host. Grading writes test files and reads starting texts from these bytes
    instead of asking the box (whose git, after the agent, would run what the agent configured)."""
    listing = await runtime.run(["sh", "-c", tree.LIST_FILES], {})
    _check(listing, "listing the box's files")
    files, _ = tree.parse_listing(listing.stdout)
    configs = {}
    for name in CONFIG_NAMES:
        if name in files:
            configs[name] = (await runtime.read(name, max_bytes=1_000_000)).decode("utf-8", "replace")
    sizes = await runtime.run(["sh", "-c", 'find . -path ./.git -prune -o -type f -printf "%s %P\\0"'], {})
    size_of = {}
    for entry in _check(sizes, "sizing the box's files").split("\0"):
        size, _, path = entry.strip("\n").partition(" ")
        if size.isdigit() and path in files:
            size_of[path] = int(size)
    wanted, budget = [], HELD_BYTES
    for path in sorted(size_of, key=lambda p: _priority(p, set(tests))):
        size = size_of[path]
        if path in tests or (size <= budget and size <= HELD_FILE_BYTES):  # the test patch's files always
            wanted.append(path)
            budget -= size
    total = sum(size_of[path] for path in wanted)
    return Baseline(files=files, configs=configs, held=await _pack(runtime, wanted, files, total))


async def _pack(runtime: vf.Runtime, paths: list[str], files: dict[str, str], total: int) -> dict[str, bytes]:
    """The bytes of `paths`, carried out of the box in one tar archive; a member whose sha256 disagrees with the
    listing is dropped."""
    if not paths:
        return {}
    token = uuid.uuid4().hex
    names, archive = f"/tmp/swe-gym-held-{token}.list", f"/tmp/swe-gym-held-{token}.tar"
    await runtime.write(names, "\0".join(paths).encode("utf-8", "surrogateescape") + b"\0")
    try:
        _check(await runtime.run(["sh", "-c", _PACK, "swe-gym-pack", names, archive], {}), "packing the starting tree")
        # tar's overhead: a header and padding per file (a name over 100 bytes adds a header of its own), end blocks
        data = await runtime.read(archive, max_bytes=total + sum(2048 + len(p) for p in paths) + 20480)
    finally:
        await runtime.run(["rm", "-f", "--", names, archive], {})
    held: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archived:
            for member in archived:
                source = archived.extractfile(member) if member.isreg() else None
                if source is None:
                    continue
                content = source.read()
                if tree.sha256(content) == files.get(member.name):
                    held[member.name] = zlib.compress(content, 1)
    except (tarfile.TarError, EOFError, OSError):  # a cut archive: the members read so far are held, no more
        pass
    return held
