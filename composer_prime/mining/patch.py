"""Git-style unified diffs between two versions of a set of text files (pure), for `git apply`."""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file\n"


def _hunks(old: str, new: str) -> list[str]:
    out: list[str] = []
    diff = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), n=3, lineterm="\n")
    for index, line in enumerate(diff):
        if index < 2:
            continue  # difflib's own ---/+++ lines; the caller writes git's
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return out


def unified_patch(before: dict[str, str | None], after: dict[str, str | None]) -> str:
    """The patch taking `before` to `after` (path -> text, None = absent), files in sorted order."""
    out: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out += ["new file mode 100644\n", "--- /dev/null\n", f"+++ b/{path}\n"]
        elif new is None:
            out += ["deleted file mode 100644\n", f"--- a/{path}\n", "+++ /dev/null\n"]
        else:
            out += [f"--- a/{path}\n", f"+++ b/{path}\n"]
        out += _hunks(old or "", new or "")
    return "".join(out)
