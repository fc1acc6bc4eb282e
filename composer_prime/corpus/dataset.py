"""The Feature Deletion corpus as a Hugging Face dataset: parquet shards and a dataset card, built from mined packages.

`composer-prime mine-corpus` mines one package at a time into a corpus folder and calls `build_dataset(out)` after each
package; `composer-prime corpus-dataset --out OUT [--publish]` runs the same build by hand. The layout is the interface
between the two:

    OUT/packages/<name>-<version>/tasks.jsonl     `record.MinedTask` rows (mine-corpus), each naming its `image`
    OUT/packages/<name>-<version>/<base>.tar.gz   the repository-state tarballs the rows name in `base`
    OUT/packages/<name>-<version>/package.json    `PackageInfo`: name, version, source, license, image, image_bytes,
                                                  report (mine-corpus; fields it adds are kept and ignored here)
    OUT/README.md                                 the dataset card (written here, last: the build's commit point)
    OUT/data/<name>-<version>/tasks-<hash>.parquet   config `tasks` (the default): one row per task
    OUT/data/<name>-<version>/bases-<hash>.parquet   config `bases`: one row per repository-state tarball

`datasets.load_dataset(OUT)` reads the card's `configs` and loads the `tasks` config; `load_dataset(OUT, "bases")` the
tarballs. A task row names its package (`package`, the folder name; `name`, `version`, `source`, `license`), its
`image`, browsing columns (`task_id`, `kind`, `path`, `qualname`, `deletion`, `prompt`, `gold_patch`, `fail_to_pass`,
`pass_to_pass`) and, in `task`, the whole `MinedTask` as JSON: what the feature-deletion taskset reads. A repository
state is shared by every task mined from it, so the tarballs travel once, in the `bases` config keyed by
(`package`, `base`), rather than in every task row. A row without an image takes its package's `image`.

The build, in order:

1. Read every package folder (sorted by name, newest version first). A row that does not validate, a row whose
   `base` tarball is missing and a package folder without a valid `package.json` or `tasks.jsonl` are reported, one
   line each, and left out; the rest is built.
2. With `publish`, keep only packages whose license allows redistribution (`licenses.classify`); the card lists the
   others and why.
3. Drop every task whose gold patch another task already has (`patch_key`: the lines it adds and removes per file,
   wherever its hunks sit), and every repeated `task_id`; the first in the order of step 1 is kept.
4. Write each package's shards (at most `shard_rows` rows and about `shard_bytes` bytes each) under names that are
   a hash of their bytes, each atomically, skipping those already there (a package that did not change is not
   rewritten); then the card, atomically, naming every shard; then remove the shards it no longer names. A crash
   before the card's rename leaves the previous card, and every shard it names, intact: the previous dataset. Same
   input, same bytes. Builds of one folder take turns (a lock file, `packages/.dataset.lock`); a build with no task
   to write is refused, leaving the previous dataset.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from composer_prime.atomic import fsync_dir, write_atomic
from composer_prime.corpus import shards
from composer_prime.corpus.dataset_card import CARD, DatasetReport, Package, PackageInfo, card_files, render_card
from composer_prime.corpus.licenses import classify
from composer_prime.mining.record import MinedTask, parse_row

SHARD_ROWS = 1000
SHARD_BYTES = 256 * 2**20
SHOWN = 10
"""Reasons listed in the error of a build that has no task to write."""
LOCK = ".dataset.lock"
"""In `packages/`: held while a build runs, so that builds of one folder (mine-corpus workers, a hand-run
`corpus-dataset`) take turns."""


class DatasetInputError(ValueError):
    """The corpus folder cannot be built into a dataset; the message names the path and the fix."""


def _log(line: str) -> None:
    print(line, file=sys.stderr)


def _version_key(version: str) -> tuple:
    """Natural order of version strings (1.10 after 1.9), for "newest first"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", version) if part)


def patch_key(patch: str) -> str:
    """What two tasks with "the same gold patch" share: per file, the lines the patch adds and removes (context and
    hunk positions aside, so the same feature mined from two versions of a package matches)."""
    kept: list[str] = []
    in_hunk = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            kept.append(line)
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line[:1] in "+-":
            kept.append(line.rstrip())
    return hashlib.sha256("\n".join(kept).encode("utf-8")).hexdigest()


def _read_package(folder: Path, problems: list[str], log: Callable[[str], None]) -> Package | None:
    where = f"packages/{folder.name}"
    info_path = folder / "package.json"
    try:
        info = PackageInfo.model_validate_json(info_path.read_bytes())
    except FileNotFoundError:
        problems.append(f"{where}: package.json is missing; the package is left out (re-run mine-corpus for it)")
        return None
    except ValidationError as exc:
        first = exc.errors()[0]
        problems.append(
            f"{where}/package.json: field {'.'.join(map(str, first['loc'])) or '<file>'!r}: {first['msg']}; "
            "the package is left out (fix the field or re-run mine-corpus for it)"
        )
        return None
    package = Package(folder, info, classify(info.license))
    tasks_path = folder / "tasks.jsonl"
    if not tasks_path.is_file():
        problems.append(f"{where}: tasks.jsonl is missing; the package has no tasks (re-run mine-corpus for it)")
        return package
    for number, line in enumerate(tasks_path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        task, found = parse_row(line, number)
        if task is None:
            problems.extend(f"{where}/tasks.jsonl: {text}" for text in found)
            continue
        if not (folder / task.base).is_file():
            problems.append(
                f"{where}/tasks.jsonl: row {number} (task_id {task.task_id!r}): field 'base' = {task.base!r}: no such "
                f"file in {where}; the row is left out (the tarball must stay beside tasks.jsonl)"
            )
            continue
        if task.image is None and info.image is not None:
            task = task.model_copy(update={"image": info.image})
        package.tasks.append(task)
    log(f"read {where}: {len(package.tasks)} task(s), license {package.verdict.license}")
    return package


def _task_row(package: Package, task: MinedTask) -> dict[str, Any]:
    info = package.info
    return {
        "task_id": task.task_id,
        "package": package.folder.name,
        "name": info.name,
        "version": info.version,
        "source": info.source,
        "license": package.verdict.license,
        "image": task.image,
        "kind": task.feature.kind,
        "path": task.feature.path,
        "qualname": task.feature.qualname,
        "deletion": task.feature.deletion,
        "prompt": task.prompt,
        "gold_patch": task.gold_patch,
        "fail_to_pass": list(task.fail_to_pass),
        "pass_to_pass": list(task.pass_to_pass),
        "base": task.base,
        "task": task.model_dump_json(),
    }


def _select(packages: list[Package], publish: bool) -> tuple[list[Package], dict[str, str], list[tuple[str, str]]]:
    kept: list[Package] = []
    excluded: dict[str, str] = {}
    duplicates: list[tuple[str, str]] = []
    owners: dict[str, str] = {}
    for package in packages:
        if publish and not package.verdict.allowed:
            excluded[package.folder.name] = package.verdict.reason
            continue
        unique = []
        for task in package.tasks:
            seen = owners.get(patch_key(task.gold_patch)) or owners.get("id:" + task.task_id)
            if seen is not None:
                duplicates.append((task.task_id, seen))
                package.duplicates += 1
                continue
            owners[patch_key(task.gold_patch)] = owners["id:" + task.task_id] = task.task_id
            unique.append(task)
        package.tasks = unique
        kept.append(package)
    return kept, excluded, duplicates


def build_dataset(
    out_dir: Path,
    *,
    publish: bool,
    shard_rows: int = SHARD_ROWS,
    shard_bytes: int = SHARD_BYTES,
    log: Callable[[str], None] = _log,
) -> DatasetReport:
    """Build `out_dir/data/` and `out_dir/README.md` from `out_dir/packages/*` (module docstring); with `publish`,
    only packages whose license allows redistribution. Raises DatasetInputError when there is no packages folder or
    no task to write (an empty dataset would replace the previous one; `datasets` cannot load empty shards)."""
    out = Path(out_dir)
    root = out / "packages"
    if not root.is_dir():
        raise DatasetInputError(
            f"{out}: no packages/ folder; point --out at the folder `composer-prime mine-corpus --out` wrote "
            "(it holds packages/<name>-<version>/tasks.jsonl)"
        )
    from filelock import FileLock

    with FileLock(root / LOCK):  # one build at a time: another's cleanup would remove this one's new shards
        return _build(out, root, publish, shard_rows, shard_bytes, log)


def _build(
    out: Path, root: Path, publish: bool, shard_rows: int, shard_bytes: int, log: Callable[[str], None]
) -> DatasetReport:
    problems: list[str] = []
    folders = sorted(
        (path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")), key=lambda p: p.name
    )
    read = [package for path in folders if (package := _read_package(path, problems, log)) is not None]
    read.sort(key=lambda p: _version_key(p.info.version), reverse=True)  # stable: by name, newest version first
    read.sort(key=lambda p: p.info.name.lower())
    packages, excluded, duplicates = _select(read, publish)
    if duplicates:
        log(f"dedupe: {len(duplicates)} task(s) share a gold patch or task_id with an earlier one and are dropped")

    total = sum(len(package.tasks) for package in packages)
    if not total:
        why = [f"{name}: {reason}" for name, reason in sorted(excluded.items())] + problems
        raise DatasetInputError(
            f"{out}: no task to write from {len(folders)} package folder(s); the previous dataset, if any, is left "
            "as it was"
            + "".join(f"\n  {line}" for line in why[:SHOWN])
            + (f"\n  ... and {len(why) - SHOWN} more" if len(why) > SHOWN else "")
        )
    tasks_schema, bases_schema = shards.schemas()
    data = out / "data"
    written: list[Path] = []
    files: dict[str, list[str]] = {"tasks": [], "bases": []}
    base_count = 0
    for package in packages:
        rows = [_task_row(package, task) for task in package.tasks]
        sizes = [sum(len(str(value)) for value in row.values()) for row in rows]
        for span in shards.plan(sizes, shard_rows, shard_bytes) if rows else []:
            blob = shards.to_parquet([rows[i] for i in span], tasks_schema)
            files["tasks"].append(_place(data, package.folder.name, "tasks", blob, written, log))
        bases = sorted({task.base for task in package.tasks})
        base_count += len(bases)
        sizes = [(package.folder / base).stat().st_size for base in bases]
        for span in shards.plan(sizes, shard_rows, shard_bytes) if bases else []:
            blobs = {bases[i]: (package.folder / bases[i]).read_bytes() for i in span}
            rows = [
                {
                    "package": package.folder.name,
                    "base": base,
                    "sha256": hashlib.sha256(blob).hexdigest(),
                    "size": len(blob),
                    "tarball": blob,
                }
                for base, blob in blobs.items()
            ]
            per_group = max(1, shards.ROW_GROUP_BYTES // max(1, *(sizes[i] for i in span)))
            blob = shards.to_parquet(rows, bases_schema, per_group)
            files["bases"].append(_place(data, package.folder.name, "bases", blob, written, log))
    for folder in {path.parent for path in written} | ({data} if written else set()):
        fsync_dir(folder)
    report = DatasetReport(out, files, total, base_count, read, excluded, duplicates, problems)
    write_atomic(out / CARD, render_card(report, publish=publish))
    fsync_dir(out)
    named = {data / path.removeprefix("data/") for paths in files.values() for path in paths}
    for stale in sorted(data.rglob("*"), reverse=True):  # files the card no longer names, then emptied folders
        if stale.is_file() and stale not in named:
            stale.unlink()
        elif stale.is_dir() and not any(stale.iterdir()):
            stale.rmdir()
    log(f"dataset: {total} task(s) from {len(packages)} package(s) in {out} ({CARD} and data/)")
    return report


def _place(data: Path, package: str, config: str, blob: bytes, written: list[Path], log: Callable[[str], None]) -> str:
    """Write one shard under its content's name (`data/<package>/<config>-<sha256[:16]>.parquet`) unless a shard
    of that name is there already (renamed into place whole, so it is complete); return its card path."""
    path = data / package / f"{config}-{hashlib.sha256(blob).hexdigest()[:16]}.parquet"
    if not path.is_file():
        write_atomic(path, blob)
        written.append(path)
        log(f"wrote {path.relative_to(data.parent)} ({len(blob) / 2**20:.1f} MiB)")
    return path.relative_to(data.parent).as_posix()


@dataclass(frozen=True)
class DatasetTask:
    """One task read back from a dataset, with its repository state."""

    task: MinedTask
    package: str
    base: str
    """Base64 of the repository-state tarball (one string per tarball, shared by its tasks)."""


def read_dataset(folder: Path) -> tuple[list[DatasetTask], list[str]]:
    """The tasks of a dataset folder (the card names the shards) and one message per bad row (shard, row number,
    field, value); bad rows are left out. Raises DatasetInputError when the folder holds no dataset."""
    files = card_files(folder)
    if files is None:
        raise DatasetInputError(
            f"{folder}: no dataset card ({CARD} with `configs` naming the tasks and bases shards); build one with "
            "`composer-prime corpus-dataset --out FOLDER`"
        )
    errors = [
        f"{CARD} names {path}, which is not in {folder}: its rows are missing (copy the whole folder, or rebuild it "
        "with `composer-prime corpus-dataset`)"
        for path in files.missing
    ]
    bases: dict[tuple[str, str], str] = {}
    for shard, number, row in shards.read_rows(files.bases, ["package", "base", "sha256", "tarball"]):
        blob = row["tarball"] or b""
        if hashlib.sha256(blob).hexdigest() != row["sha256"]:
            errors.append(f"{shard}: row {number} (base {row['base']!r}): the tarball does not match its sha256")
            continue
        bases[(row["package"], row["base"])] = base64.b64encode(blob).decode("ascii")
    tasks: list[DatasetTask] = []
    for shard, number, row in shards.read_rows(files.tasks, ["package", "task"]):
        task, found = parse_row(row["task"] or "", number, what="field 'task' is")
        if task is None:
            errors.extend(f"{shard}: {text}" for text in found)
            continue
        base = bases.get((row["package"], task.base))
        if base is None:
            errors.append(
                f"{shard}: row {number} (task_id {task.task_id!r}): base {task.base!r} of package {row['package']!r} "
                "is not in the bases config; rebuild the dataset with `composer-prime corpus-dataset`"
            )
            continue
        tasks.append(DatasetTask(task, row["package"], base))
    return tasks, errors
