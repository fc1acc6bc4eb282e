"""Near copies of deleted code elsewhere in a repository, found by token-shingle overlap.

A repository may hold the code a task deletes twice: a vendored copy (`_vendor/`), an older variant in another
module, a docs page with the listing. An exact-match check misses a copy with one line changed, so the miner
compares normalised token shingles: the text is reduced to its tokens (identifiers, numbers, punctuation; comments
and whitespace dropped), and every run of `SHINGLE` consecutive tokens is hashed. The overlap of a file with the
deleted code is the share of the deleted code's shingles the file also holds. A task is refused when some visible
file holds at least `NEAR_COPY` of them, and call-site hints leave out files holding at least `HINT_LIMIT`.
Code too short to have `MIN_SHINGLES` shingles is left to the exact check (`snapshot.leaks`).

Copies outside the repository count too: `installed_copies` finds, in the folders of `sys.path` (site-packages,
including vendored trees such as `setuptools/_vendor/more_itertools`), the Python files of packages named like the
repository's top-level packages. A rollout on a runtime that shares those folders could read them. mine-corpus
turns this off (`MineConfig.host_copies`): its tasks run in their own image, which `image_copies` searches instead.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

SHINGLE = 8
NEAR_COPY = 0.5
HINT_LIMIT = 0.2
MIN_SHINGLES = 12

_COMMENT = re.compile(r"#[^\n]*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|[^\w\s]")


def shingles(text: str) -> set[int]:
    """Hashes of every run of `SHINGLE` consecutive tokens of `text` (comments left out)."""
    tokens = _TOKEN.findall(_COMMENT.sub("", text))
    return {hash(tuple(tokens[i : i + SHINGLE])) for i in range(max(0, len(tokens) - SHINGLE + 1))}


class CopyIndex:
    """The shingles of every text file of a repository, computed once per mining run."""

    def __init__(self, texts: Mapping[str, str]):
        self.shingles = {path: shingles(text) for path, text in texts.items()}

    def overlaps(self, removed: str, changed: Mapping[str, str | None], skip: Iterable[str] = ()) -> dict[str, float]:
        """Per file (with `changed` files' new texts), the share of `removed`'s shingles it holds; files at 0 left out.

        Empty when `removed` is too short to judge this way.
        """
        needle = shingles(removed)
        if len(needle) < MIN_SHINGLES:
            return {}
        skip = set(skip)
        found = {}
        for path, held in self.shingles.items():
            if path in skip:
                continue
            if path in changed:
                text = changed[path]
                if text is None:
                    continue
                held = shingles(text)
            share = len(needle & held) / len(needle)
            if share > 0:
                found[path] = share
        return found


def installed_copies(packages: Iterable[str], roots: Iterable[str] | None = None, limit: int = 2000) -> dict[str, str]:
    """Absolute path -> text of the Python files of every folder named like one of `packages` under the `sys.path`
    folders (`roots`), two levels deep at most (`pkg/`, `*/pkg/`, `*/_vendor/pkg/`); at most `limit` files."""
    found: dict[str, str] = {}
    names = set(packages)
    for root in roots if roots is not None else sys.path:
        base = Path(root or ".").resolve()
        if not base.is_dir() or "site-packages" not in base.parts and "dist-packages" not in base.parts:
            continue
        for pattern in ("{}", "*/{}", "*/*/{}"):
            for name in names:
                for folder in base.glob(pattern.format(name)):
                    for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
                        if len(found) >= limit:
                            return found
                        found[str(path)] = path.read_text("utf-8", errors="replace")
    return found
