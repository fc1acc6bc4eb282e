"""Phase one of a grading, judged on the host: the tree as the driver listed it, against the starting tree.

From the listing and the changed files' bytes one driver run sent back (`look_steps`), the host computes the agent's
diff (`diff.tree_diff`), the strays to remove and whatever stands where grading writes (`tree.strays`,
`tree.in_the_way`), the owned files to write where they differ, and scans every changed `.py` file's added lines
(`tree.scan`); the removals and writes go into the next driver run (`prepare_tree`). Nothing of it runs in the box
but the listing and the reads.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass, field

import verifiers.v1 as vf

from composer_prime.grading import tree
from composer_prime.grading.batch import Batch, Step
from composer_prime.grading.diff import tree_diff

SCAN_LIMIT = 500
"""More changed `.py` files than this voids the grade (each one is read and scanned)."""
SCAN_BYTES = 2_000_000
SCAN_TOTAL_BYTES = 24_000_000
"""Bytes of changed files scanned in one grading at most (the scan reads about 2 MB a second on one core, and runs in
the env server's process): past it the grading is void, naming the total, rather than left to the scoring timeout
with no grade at all (red40's K2: 300 changed modules of 1.8 MB)."""
"""A changed `.py` file larger than this voids the grade: the scan reads whole files or none."""


@dataclass
class Baseline:
    """The work tree before the agent ran, as the grader may trust it: held on the host, never read from the box."""

    files: tree.Manifest
    """Path -> sha256 (or a prefix of it) of every file of the starting tree."""
    content: Callable[[str], bytes | None]
    """The starting bytes of a path in `files`, None where the host holds none: the scan's added lines and the
    agent's diff are computed against it, on the host."""
    owned: dict[str, bytes] = field(default_factory=dict)
    """Files written into the tree before the run, replacing the agent's version (held-out and restored tests)."""
    unheld: frozenset[str] = frozenset()
    """Files that should be owned (test files) whose content the host does not hold: changing one voids."""


class Void(Exception):
    """A tree grading cannot handle (a listing cut or failed, a path that is not UTF-8): the grade is void with this
    reason and nothing more runs."""


READ_BUDGET = 16 << 20
"""Bytes of changed files the grading driver sends back with the listing (for the diff and the scan); the rest are
read one by one, as `Prefetched` falls back to the runtime."""


class Prefetched:
    """`runtime` for reads of files the driver already sent (`batch.Batch.changed`, `read` steps): those are answered
    from memory, any other read goes to the runtime."""

    def __init__(self, runtime: vf.Runtime, files: dict[str, dict]):
        self.runtime = runtime
        self.files = files

    def __getattr__(self, name: str):
        return getattr(self.runtime, name)

    def size(self, path: str) -> int | None:
        entry = self.files.get(path, {})
        return entry["size"] if isinstance(entry.get("size"), int) and "error" not in entry else None

    async def read(self, path: str, max_bytes: int | None = None) -> bytes:
        entry = self.files.get(path, {})
        if "error" in entry:
            raise OSError(entry["error"])
        if "data" not in entry:
            return await self.runtime.read(path, max_bytes=max_bytes)
        data = base64.b64decode(entry["data"])
        return data if max_bytes is None else data[:max_bytes]


@dataclass
class Looked:
    """The tree as phase one of a grading saw it: the listing, and the changed files' sizes and bytes."""

    listing: Step
    changed: Step


def look_steps(batch: Batch, baseline: Baseline) -> Looked:
    """Add the listing of the tree (`tree.LIST_FILES`) and the read of every file that differs from the starting one."""
    listing = batch.run(["sh", "-c", tree.LIST_FILES])
    return Looked(listing, batch.changed(listing, baseline.files, SCAN_BYTES, READ_BUDGET))


async def prepare_tree(
    runtime: vf.Runtime, baseline: Baseline, looked: Looked, batch: Batch
) -> tuple[list[str], list[str], str, Prefetched]:
    """From the listing `looked` took: diff the tree against the starting one (on the host), add to `batch` the
    removal of the strays and of whatever stands where grading writes (`tree.in_the_way`) and the write of the owned
    files where they differ, scan the changes: (removed paths, void reasons, the agent's diff, the tree's reader).
    `Void` when the tree cannot be listed whole."""
    if not looked.listing.reported:
        raise vf.SandboxError(f"grading: listing the tree did not run: {looked.listing.result.get('error', '')}")
    seen = tree.read_listing(looked.listing.stdout)
    if seen.problem is not None:
        raise Void(f"{seen.problem}: {looked.listing.stderr.strip()[-300:]}".rstrip(": "))
    current, links = seen.files, seen.links
    reader = Prefetched(runtime, looked.changed.result.get("files") or {})
    patch = await tree_diff(reader, baseline.files, baseline.content, current, links)
    removed = sorted(
        {
            *tree.strays(baseline.files, current, links, baseline.owned),
            *tree.in_the_way(baseline.files, seen, baseline.owned),
        }
    )
    # an owned file the agent changed goes before it is written: it may be read-only, or a fifo's name
    rewrite = [p for p, data in baseline.owned.items() if p in removed or current.get(p) != tree.sha256(data)]
    clear = sorted({*removed, *(p for p in rewrite if p in current)})
    for start in range(0, len(clear), 200):
        batch.run(["rm", "-rf", "--", *clear[start : start + 200]], check="grading: removing added files")
    for path in rewrite:
        batch.write(path, baseline.owned[path])
    void = [
        f"{path}: a test file changed and the host holds no copy of it to restore"
        for path in sorted(baseline.unheld)
        if not current.get(path, "").startswith(baseline.files.get(path, "-"))
    ]
    kept = [p for p in current if p not in removed and p not in baseline.owned]
    changed = tree.changed_python(baseline.files, current, kept)
    if len(changed) > SCAN_LIMIT:
        return (
            removed,
            [*void, f"{len(changed)} changed Python files (more than {SCAN_LIMIT} cannot be scanned)"],
            patch,
            reader,
        )
    return removed, void + await scan_changed(reader, baseline, changed), patch, reader


async def scan_changed(runtime: vf.Runtime, baseline: Baseline, changed: list[str]) -> list[str]:
    """The scan's void reasons for `changed` files, each read whole; a file too large or unreadable voids too. Sizes
    the driver sent (`Prefetched`) are used as they are; the others are read with `stat` in the box."""
    if not changed:
        return []
    sizes = {p: n for p in changed if (n := runtime.size(p) if isinstance(runtime, Prefetched) else None) is not None}
    missing = [p for p in changed if p not in sizes]
    if missing:
        stat = await runtime.run(["stat", "-L", "--printf", "%s\\0", "--", *missing], {})
        listed = (stat.stdout or "").split("\0")[: len(missing)]
        sizes |= {p: int(n) for p, n in zip(missing, listed, strict=False) if n.isdigit()}
    total = sum(size for size in sizes.values() if size <= SCAN_BYTES)
    if total > SCAN_TOTAL_BYTES:
        return [
            f"the {len(changed)} changed files hold {total} bytes, over the scan's {SCAN_TOTAL_BYTES} bytes per grading "
            "(each changed file is scanned whole)"
        ]
    void: list[str] = []
    for path in changed:
        if path not in sizes:
            void.append(f"{path}: could not be read for the scan")
            continue
        if sizes[path] > SCAN_BYTES:
            void.append(f"{path}: {sizes[path]} bytes, over the scan's {SCAN_BYTES} byte limit")
            continue
        try:
            after = (await runtime.read(path, max_bytes=SCAN_BYTES)).decode("utf-8", "replace")
        except (vf.SandboxError, OSError) as exc:
            void.append(f"{path}: could not be read for the scan ({exc})")
            continue
        held = baseline.content(path) if path in baseline.files else None
        # Off the env server's event loop: the scan is pure Python, seconds for a few large files.
        void += await asyncio.to_thread(
            tree.scan, path, None if held is None else held.decode("utf-8", "replace"), after
        )
    return void
