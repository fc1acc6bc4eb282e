"""What building and loading a Feature Deletion dataset costs as the corpus grows (`composer_prime/corpus/dataset.py`).

A synthetic corpus of N packages, laid out as mine-corpus writes it: each package holds the bundled toolz 1.2.0
sample's three rows (task ids and gold patches made unique per package, so dedupe drops nothing) and one
repository-state tarball of `--tarball-mib` random bytes (the build stores tarballs without reading inside them, so
their content does not change its cost; real states range from 50 KiB, toolz, to tens of MiB). It times, in one run:
the first build, a rebuild after one more package is mined (what mine-corpus does after each package), a rebuild of
an unchanged corpus, `read_dataset` (what the feature-deletion taskset runs at load) and `datasets.load_dataset` of
both configs, and prints the size on disk of the packages and of the dataset.

    python bench/corpus_dataset.py [--packages 100] [--tarball-mib 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from composer_prime.corpus.dataset import build_dataset, read_dataset
from composer_prime.corpus.dataset_card import card_files
from tests.support.corpus import sample_rows


def add_package(out: Path, index: int, tarball_bytes: int) -> None:
    name, version = f"pkg{index:04d}", "1.0"
    folder = out / "packages" / f"{name}-{version}"
    folder.mkdir(parents=True)
    base = f"tasks.jsonl.{index:016x}.tar.gz"
    (folder / base).write_bytes(os.urandom(tarball_bytes))
    rows = []
    for row in sample_rows():
        unique = row["gold_patch"].replace(" @@\n", f" @@\n+# {name}\n", 1)  # a line of its own in the first hunk
        rows.append({**row, "task_id": f"{name}-{row['task_id']}", "repo": name, "base": base, "gold_patch": unique})
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    info = {"name": name, "version": version, "source": "pypi", "license": "MIT", "image": f"localhost/fd-{name}:1.0"}
    (folder / "package.json").write_text(json.dumps(info))


def size(path: Path) -> int:
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


def timed(label: str, rows: list[tuple[str, str]], action) -> object:
    start = time.perf_counter()
    result = action()
    rows.append((label, f"{time.perf_counter() - start:.2f} s"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", type=int, default=100)
    parser.add_argument("--tarball-mib", type=float, default=1.0)
    args = parser.parse_args()
    tarball_bytes = int(args.tarball_mib * 2**20)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="corpus-bench-") as tmp:
        out = Path(tmp) / "corpus"
        for index in range(args.packages):
            add_package(out, index, tarball_bytes)
        quiet = lambda line: None  # noqa: E731
        timed(f"first build, {args.packages} packages", rows, lambda: build_dataset(out, publish=True, log=quiet))
        add_package(out, args.packages, tarball_bytes)
        timed("rebuild after one more package", rows, lambda: build_dataset(out, publish=True, log=quiet))
        timed("rebuild, nothing changed", rows, lambda: build_dataset(out, publish=True, log=quiet))
        tasks, errors = timed("read_dataset (the taskset's load)", rows, lambda: read_dataset(out))
        assert not errors and len(tasks) == 3 * (args.packages + 1), (len(tasks), errors[:3])

        import datasets

        cache = str(Path(tmp) / "hf-cache")
        datasets.disable_progress_bars()
        timed(
            "datasets.load_dataset, tasks",
            rows,
            lambda: datasets.load_dataset(str(out), split="train", cache_dir=cache),
        )
        timed(
            "datasets.load_dataset, bases",
            rows,
            lambda: datasets.load_dataset(str(out), "bases", split="train", cache_dir=cache),
        )
        rows.append(("packages/ on disk", f"{size(out / 'packages') / 2**20:.1f} MiB"))
        rows.append(
            (
                "dataset (README.md + data/) on disk",
                f"{(size(out / 'data') + (out / 'README.md').stat().st_size) / 2**20:.1f} MiB",
            )
        )
        files = card_files(out)
        rows.append(("shards (tasks + bases)", f"{len(files.tasks)} + {len(files.bases)}"))
    width = max(len(label) for label, _ in rows)
    print(f"{'step'.ljust(width)}  value   ({args.packages} packages x 3 tasks, {args.tarball_mib} MiB tarball each)")
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
