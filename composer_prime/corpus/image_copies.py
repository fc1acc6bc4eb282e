"""Copies of a task's gold code inside its own environment image, found line by line.

A base image may already ship the package a corpus mines: pip and setuptools vendor six, idna, packaging,
pyparsing, tomli, urllib3 and more (`.../pip/_vendor/six.py`), and a distribution may install a module of its own.
An agent in that box could read the code its task deleted. So before a task is validated, one container from the
task's image (no network) runs this module's own source as a script on stdin: it walks the image's root filesystem
(`/proc`, `/sys` and `/dev` left out, symbolic links not followed), reads every text source file up to `MAX_BYTES`
(the suffixes in `TEXT_SUFFIXES`, and those members of `.whl`, `.zip` and `.egg` archives), and reports, per task,
the files holding a copy of the gold patch's added code.

The comparison is by whole lines, whitespace normalised (runs of blanks collapse to one space, ends stripped), so a
reindented copy (a method copied out to module level, tabs for spaces) still matches. Only distinctive lines count:
a line of at least `MIN_CHARS` characters holding at least `MIN_WORDS` identifiers or numbers. `pass`, `return x`,
`else:`, brackets and `raise NotImplementedError` are not distinctive, so a file sharing only such lines never
matches. A file is a copy when it holds a strict majority of the gold's distinctive lines, and at least
`MIN_MATCHED` of them; a gold patch with a single distinctive line cannot be judged this way and is left to
validation. This module uses the standard library only: the image's Python (3.7 or later) runs it as it is.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile

MIN_CHARS = 16
MIN_WORDS = 3
MIN_MATCHED = 2
MAX_BYTES = 2_000_000
MAX_ARCHIVE_BYTES = 100_000_000
TEXT_SUFFIXES = (".py", ".pyi", ".pyx", ".pxd", ".pxi", ".txt", ".rst", ".md", ".c", ".h", ".cfg", ".toml", ".json")
ARCHIVE_SUFFIXES = (".whl", ".zip", ".egg")
SKIPPED_ROOTS = ("proc", "sys", "dev")
SEARCH_TIMEOUT_S = 900.0

_WORD = re.compile(r"[A-Za-z_]\w*|\d+")


def normalise(line: str) -> str:
    """`line` with runs of whitespace collapsed to one space and its ends stripped."""
    return " ".join(line.split())


def is_distinctive(line: str) -> bool:
    """Whether a normalised line is long and wordy enough that holding it says something (see the docstring)."""
    return len(line) >= MIN_CHARS and len(_WORD.findall(line)) >= MIN_WORDS


def gold_lines(gold_patch: str) -> list[str]:
    """The distinctive lines the unified diff `gold_patch` adds, normalised, each once, in order."""
    added = (line[1:] for line in gold_patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    return list(dict.fromkeys(line for line in map(normalise, added) if is_distinctive(line)))


def is_copy(matched: int, total: int) -> bool:
    """Whether a file holding `matched` of a gold's `total` distinctive lines is a copy of it."""
    return matched >= MIN_MATCHED and 2 * matched > total


def matches(text: str, needles: dict[str, list[str]]) -> dict[str, int]:
    """Per task (of `needles`: task -> its distinctive lines), how many of its lines `text` holds; copies only."""
    held = {normalise(line) for line in text.splitlines()}
    found = {}
    for task, lines in needles.items():
        matched = sum(1 for line in lines if line in held)
        if is_copy(matched, len(lines)):
            found[task] = matched
    return found


def _texts(root: str):  # type: ignore[no-untyped-def]
    """(path, text) of every text source file under `root`, archive members named `archive!member`."""
    skipped = {os.path.join(root, name) for name in SKIPPED_ROOTS}
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(s for s in subfolders if os.path.join(folder, s) not in skipped)
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                size = os.path.getsize(path)
                if name.endswith(TEXT_SUFFIXES) and size <= MAX_BYTES:
                    with open(path, "rb") as handle:
                        yield path, handle.read().decode("utf-8", "replace")
                elif name.endswith(ARCHIVE_SUFFIXES) and size <= MAX_ARCHIVE_BYTES and zipfile.is_zipfile(path):
                    with zipfile.ZipFile(path) as archive:
                        for member in archive.infolist():
                            if member.filename.endswith(TEXT_SUFFIXES) and member.file_size <= MAX_BYTES:
                                text = archive.read(member).decode("utf-8", "replace")
                                yield f"{path}!{member.filename}", text
            except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
                continue  # unreadable: nothing an agent could read either


def search(root: str, needles: dict[str, list[str]]) -> dict:
    """Walk `root`: {"files": files read, "found": {task: [[path, matched, total], ...]}}."""
    found: dict[str, list] = {}
    files = 0
    for path, text in _texts(root):
        files += 1
        for task, matched in matches(text, needles).items():
            found.setdefault(task, []).append([path, matched, len(needles[task])])
    return {"files": files, "found": found}


def _script_main(payload: str) -> None:
    """Entry inside the image: search `/` for the payload's lines, print the result as one JSON line."""
    print(json.dumps(search(os.sep, json.loads(payload))))
    sys.stdout.flush()


def search_image(engine: str, image: str, python: str, golds: dict[str, str]) -> tuple[int, dict[str, list]]:
    """Search `image` for each task's gold code (task -> gold patch) in one container without network.

    Returns (files read, task -> [[path, lines matched, distinctive lines], ...]) for the tasks found; raises
    `box.BoxError` when the container cannot run.
    """
    from composer_prime.mining.box import BoxError
    from composer_prime.process.commands import run_checked_host

    needles = {
        task: lines for task, lines in ((t, gold_lines(g)) for t, g in golds.items()) if len(lines) >= MIN_MATCHED
    }
    if not needles:
        return 0, {}
    with open(__file__, encoding="utf-8") as handle:
        script = handle.read() + f"\n_script_main({json.dumps(needles)!r})\n"
    out = run_checked_host(
        [engine, "run", "--rm", "-i", "--network", "none", "--entrypoint", python, image, "-"],
        error=BoxError,
        timeout_s=SEARCH_TIMEOUT_S,
        input=script,
    )
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise BoxError(f"the gold-code search in {image} printed no result: {out[-500:]!r}") from exc
    return result["files"], result["found"]


def describe(found: list) -> str:
    """The drop reason for a task whose gold code `found` lists (from `search_image`)."""
    shown = ", ".join(f"{path} ({matched}/{total} lines)" for path, matched, total in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"gold code in the image: {shown}{more}"
