"""The tree graded as a private copy, in a folder the agent never saw.

Once the rollout's processes are gone, `private_copy(runtime)` copies the work tree (without `.git`, which grading
does not use) into a fresh folder with a random name (`/tmp/composer-prime-tree-<32 hex>`, mode 700) and returns a
`CopyView`: the same runtime, with every command started in the copy and every relative path of `read`/`write`
resolved in it. The grader runs all its steps through the view, so nothing left pointing at the box's own folder (a
process that escaped, a path baked into the agent's code, a link) reaches the tree under test; `remove()` deletes the
copy at the end. Absolute paths (the grader's scratch folder) pass through unchanged.

On a docker or podman box the agent was root in the container, so everything in it (the image's `python3`, its
standard library, pytest, `sha256sum`) may have been rewritten. `grader_box_copy(runtime)` grades elsewhere: it
starts a second container from the same image (the grader box: the agent never had a handle to it, and an image
cannot be written from a container), packs the tree in the agent's box (`tar`, without `.git`), carries the archive
over through the runtimes' file I/O, and unpacks it in the grader box with the grader box's own interpreter, keeping
regular files and folders only (no links, devices, absolute or `..` names, no set-id bits: the agent's `tar` may
have been replaced and is not trusted to pack honestly). The view it returns is rooted in the grader box; `remove()`
also removes the grader box (in a thread, `rm --force -t 0`: the box's `sleep infinity` ignores SIGTERM).
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import threading
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import verifiers.v1 as vf

from composer_prime.process.pidns import NS_VAR
from composer_prime.process.reaper import BOX_VAR

if TYPE_CHECKING:
    from verifiers.v1.runtimes import ProgramResult, Runtime

_COPY = r"""
dst=$1
mkdir -m 700 -- "$dst" || exit 1
find . -mindepth 1 -maxdepth 1 ! -name .git -exec cp -a -t "$dst" -- {} + 2>"$dst.err" || {
  tail -c 300 "$dst.err" >&2; rm -f -- "$dst.err"; exit 1; }
rm -f -- "$dst.err"
cd -P -- "$dst" && pwd -P
"""
_IN = 'cd -P -- "$0" && exec "$@"'


_PACK = r"""
out=$1
tar --exclude=./.git -cf "$out" . || exit 1
"""
_UNPACK = r"""
import os, sys, tarfile
archive, root = sys.argv[1], sys.argv[2]
os.mkdir(root, 0o700)
with tarfile.open(archive) as tar:
    for member in tar:
        parts = member.name.split("/")
        if member.name.startswith("/") or ".." in parts or not (member.isreg() or member.isdir()):
            continue
        name = "/".join(p for p in parts if p not in ("", "."))
        if not name:
            continue
        target = os.path.join(root, name)
        if member.isdir():
            os.makedirs(target, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        source = tar.extractfile(member)
        with open(target, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        os.chmod(target, member.mode & 0o755)
os.unlink(archive)
print(os.path.realpath(root))
"""
GRADER_BOX_BYTES = 1 << 30
"""The largest tree archive carried into a grader box; a larger one fails the grading."""


class CopyView:
    """`runtime`, rooted at the private copy `root`: what the grader sees of the tree."""

    def __init__(self, runtime: Runtime, root: str, grader_box: bool = False):
        self.runtime = runtime
        self.root = root
        self.grader_box = grader_box
        """`runtime` is a grader box made for this copy, removed with it."""

    def __getattr__(self, name: str):
        return getattr(self.runtime, name)

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.root}/{path}"

    async def run(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        return await self.runtime.run(["sh", "-c", _IN, self.root, *argv], env)

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        return await self.runtime.read(self._path(path), max_bytes=max_bytes)

    async def write(self, path: str, data: bytes) -> None:
        await self.runtime.write(self._path(path), data)

    async def remove(self) -> None:
        if self.grader_box:
            await _remove_box(self.runtime)
        else:
            await self.runtime.run(["rm", "-rf", "--", self.root], {})


async def private_copy(runtime: Runtime) -> CopyView:
    """Copy the box's work tree to a fresh random folder; the view rooted there. `vf.SandboxError` when the copy
    fails (a path over PATH_MAX, a file the copy cannot read), with the last 300 bytes of `cp`'s errors: grading
    turns it into a void grade."""
    target = f"/tmp/composer-prime-tree-{secrets.token_hex(16)}"
    result = await runtime.run(["sh", "-c", _COPY, "composer-prime-copy", target], {})
    root = (result.stdout or "").strip()
    if result.exit_code != 0 or not root.startswith("/"):
        await runtime.run(["rm", "-rf", "--", target], {})
        raise vf.SandboxError(
            f"grading: copying the work tree to a private folder failed: {(result.stderr or '')[-300:]}"
        )
    return CopyView(runtime, root)


async def _remove_box(box: Runtime) -> None:
    """Remove a grader box without waiting for it: in a thread, `podman rm --force -t 0` (its keep-alive is PID 1
    and ignores SIGTERM, so a plain `rm --force` waits out podman's 10 s stop timeout), then docker's and podman's
    `cleanup`; `stop()` for a runtime without one."""
    cleanup = getattr(box, "cleanup", None)
    if not callable(cleanup):
        await box.stop()
        return
    engine, container = getattr(box, "engine", None), getattr(box.info, "id", None)

    def remove() -> None:
        if engine == "podman" and isinstance(container, str) and container:  # docker's `rm --force` kills at once
            subprocess.run(
                [engine, "rm", "--force", "-t", "0", container], capture_output=True, timeout=60, check=False
            )
        cleanup()

    threading.Thread(target=remove, name="composer-prime-grader-box-rm").start()


async def grader_box_copy(runtime: Runtime, python: str = "python3", first: Awaitable | None = None) -> CopyView:
    """Start a grader box from `runtime`'s image and copy the work tree into a fresh folder there (see the module
    docstring); the view rooted at it. `vf.SandboxError` when any step fails (the box is removed then). The box
    starts while `first` (the end of the rollout's processes) runs and the tree is packed and read, and the archive is
    removed from the agent's box while it is unpacked; the unpacking script is the command's argument, so the box
    gets one write (the archive) and one run."""
    from verifiers.v1.runtimes import make_runtime

    token = secrets.token_hex(16)
    archive = f"/tmp/composer-prime-pack-{token}.tar"
    box = make_runtime(runtime.config, name=f"composer-grader-{token[:12]}")
    # the taskset's environment for commands (swe-gym: the image's conda env on PATH), held by the host, not the box;
    # the rollout's own markers stay behind
    box.env = {k: v for k, v in runtime.env.items() if k not in (BOX_VAR, NS_VAR)}
    started = asyncio.ensure_future(box.start())
    removed: asyncio.Future | None = None
    try:
        if first is not None:
            await first
        packed = await runtime.run(["sh", "-c", _PACK, "composer-prime-pack", archive], {})
        try:
            if packed.exit_code != 0:
                raise vf.SandboxError(f"grading: packing the work tree failed: {(packed.stderr or '')[-300:]}")
            data = await runtime.read(archive, max_bytes=GRADER_BOX_BYTES)
        finally:
            removed = asyncio.ensure_future(runtime.run(["rm", "-f", "--", archive], {}))
        await started
        await box.write(archive, data)
        argv = [python, "-I", "-S", "-B", "-c", _UNPACK, archive, f"/tmp/composer-prime-tree-{token}"]
        result = await box.run(argv, {})
        root = (result.stdout or "").strip()
        if result.exit_code != 0 or not root.startswith("/"):
            raise vf.SandboxError(
                f"grading: unpacking the tree in the grader box failed: {(result.stderr or '')[-300:]}"
            )
    except BaseException:
        if not started.done():
            started.cancel()
        await asyncio.gather(started, return_exceptions=True)
        await _remove_box(box)
        raise
    finally:
        if removed is not None:
            await asyncio.gather(removed, return_exceptions=True)
    return CopyView(box, root, grader_box=True)
