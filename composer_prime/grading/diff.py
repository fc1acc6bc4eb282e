"""The agent's diff, computed on the host from the starting tree's content and the graded copy: no git runs for it.

A diff made with the box's own git after the agent (`git add -A && git diff --cached`) runs what the agent configured
there: a clean filter in `.git/config` or `.gitattributes`, an fsmonitor hook, a promisor remote's upload-pack. Such
a program ran outside the rollout's PID namespace, after it had been killed, and could outlive grading. So the diff
is built here instead: the graded copy is listed with each file's sha256 (`tree.LIST_FILES`, already part of
grading), each file whose digest differs from the starting tree's is read whole through the runtime's file I/O, and
`difflib` writes a git-style unified diff against the starting content the host holds (the task's snapshot in
feature-deletion; the files read in the box before the agent started, in swe-gym).

What git would not show is left out: bytecode and caches, and paths the starting tree's root `.gitignore` names
(read from the host-held copy, never the agent's). Files over `FILE_BYTES`, non-UTF-8 files and links are named
without content; at most `MAX_FILES` files are read, and the text is cut at `PATCH_BYTES`.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

import verifiers.v1 as vf

FILE_BYTES = 1_000_000
"""A changed file larger than this is named in the diff, not shown."""
MAX_FILES = 300
"""At most this many changed files are read for the diff; the rest are named."""
PATCH_BYTES = 2_000_000
"""The diff's text is cut at this many characters."""
ALWAYS_IGNORED = ("__pycache__/", "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", "*.egg-info/")


def ignore_rules(gitignore: bytes | None) -> list[str]:
    """The patterns of a root `.gitignore` (negations and comments dropped) and the caches git would not show."""
    rules = list(ALWAYS_IGNORED)
    for raw in (gitignore or b"").decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")):
            rules.append(line)
    return rules


def ignored(path: str, rules: list[str]) -> bool:
    """Whether `path` matches one of `rules` as git reads a root `.gitignore` (without negation): a pattern with no
    inner slash matches any component (one ending in `/` only a folder above the file), one with a slash is
    anchored at the root and matches the path or a folder above it."""
    parts = PurePosixPath(path).parts
    for rule in rules:
        folder_only = rule.endswith("/")
        pattern = rule.rstrip("/")
        if "/" in pattern:
            pattern = pattern.lstrip("/")
            prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + (0 if folder_only else 1))]
            if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
                return True
        else:
            names = parts[:-1] if folder_only else parts
            if any(fnmatch.fnmatchcase(name, pattern) for name in names):
                return True
    return False


def file_diff(path: str, before: bytes | None, after: bytes | None) -> str:
    """One file's part of a git-style diff (`before` None: added; `after` None: deleted)."""
    head = f"diff --git a/{path} b/{path}\n"
    if before is None:
        head += "new file mode 100644\n"
    elif after is None:
        head += "deleted file mode 100644\n"
    texts = []
    for data in (before, after):
        try:
            texts.append(None if data is None else data.decode("utf-8"))
        except UnicodeDecodeError:
            return head + f"Binary files a/{path} and b/{path} differ\n"
    old, new = ([] if t is None else t.splitlines(keepends=True) for t in texts)
    lines = difflib.unified_diff(
        old, new, "/dev/null" if before is None else f"a/{path}", "/dev/null" if after is None else f"b/{path}", n=3
    )
    return head + "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


async def tree_diff(
    runtime: vf.Runtime,
    starting: Mapping[str, str],
    content: Callable[[str], bytes | None],
    current: Mapping[str, str],
    links: list[str],
) -> str:
    """The diff from the starting tree (`starting`: path -> sha256 or a prefix of it; `content`: its bytes, None
    where not held) to the listed tree in `runtime` (`current`: path -> sha256; `links`)."""
    rules = ignore_rules(content(".gitignore"))
    changed = sorted(
        path
        for path in set(starting) | set(current)
        if not ignored(path, rules) and not current.get(path, "").startswith(starting.get(path, "-"))
    )
    parts: list[str] = []
    size = 0
    for count, path in enumerate(changed):
        before = content(path) if path in starting else None
        after: bytes | None = None
        if path in current:
            if count >= MAX_FILES or size >= PATCH_BYTES:  # what is read stays within the diff's own bound
                parts.append(f"diff --git a/{path} b/{path}\n(not shown: more than {MAX_FILES} files changed)\n")
                continue
            try:
                after = await runtime.read(path, max_bytes=FILE_BYTES + 1)
            except (vf.SandboxError, OSError) as exc:
                parts.append(f"diff --git a/{path} b/{path}\n(could not be read: {str(exc)[:100]})\n")
                continue
            if len(after) > FILE_BYTES:
                parts.append(f"diff --git a/{path} b/{path}\n(not shown: over {FILE_BYTES} bytes)\n")
                continue
        if path in starting and before is None:
            parts.append(f"diff --git a/{path} b/{path}\n(not shown: the starting content is not held)\n")
            continue
        parts.append(file_diff(path, before, after))
        size += len(parts[-1])
    parts += [f"diff --git a/{p} b/{p}\nnew file mode 120000\n" for p in sorted(links) if not ignored(p, rules)]
    return "".join(parts)[:PATCH_BYTES]
