"""Corpus folders as `composer-prime mine-corpus` lays them out (composer_prime/corpus/dataset.py), filled with real
mined rows: the bundled toolz 1.2.0 sample, or a tasks file a test mined."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "environments/feature_deletion/feature_deletion/sample/toolz-1.2.0.jsonl"


def sample_rows() -> list[dict]:
    """The bundled sample's three rows (mined from the toolz 1.2.0 sdist), as dicts."""
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def add_package(
    corpus: Path,
    name: str,
    version: str,
    rows: list[dict],
    tasks_file: Path = SAMPLE,
    *,
    license: str | list[str] | None = "BSD-3-Clause",
    image: str | None = None,
    **info: object,
) -> Path:
    """Write `corpus/packages/<name>-<version>/`: `rows` as tasks.jsonl, the tarballs they name (copied from beside
    `tasks_file`) and package.json. Returns the package folder."""
    folder = corpus / "packages" / f"{name}-{version}"
    folder.mkdir(parents=True)
    for base in sorted({row["base"] for row in rows}):
        shutil.copyfile(tasks_file.with_name(base), folder / base)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    meta = {
        "name": name,
        "version": version,
        "source": "pypi",
        "license": license,
        "image": image,
        "image_bytes": 300 * 2**20,
        "report": {"candidates": 10, "kept": len(rows)},
        **info,
    }
    (folder / "package.json").write_text(json.dumps(meta))
    return folder
