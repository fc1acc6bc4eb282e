"""Where SWE-Gym rows come from: the Hugging Face hub, or a local JSONL / parquet file with the same fields.

Every source yields plain dicts; `rows.parse_rows` validates them. A JSONL line that is not JSON is yielded
as a string saying so, which validation reports in place, so one bad line never sinks the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> Iterator[dict[str, Any] | str]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                yield f"line {number} of {path} is not JSON ({exc.msg} at column {exc.colno})"


def read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(
            f"reading {path} needs pyarrow; install it with `pip install 'swe-gym[parquet]'` or convert the file "
            "to JSONL"
        ) from exc
    return pq.read_table(path).to_pylist()


def read_file(path: Path) -> list[dict[str, Any] | str]:
    """Raw rows from a `.jsonl` / `.json` (one object per line) or `.parquet` file."""
    if not path.is_file():
        raise FileNotFoundError(
            f"data_file {str(path)!r} does not exist; point data_file at a SWE-Gym JSONL/parquet file"
        )
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return list(read_jsonl(path))
    if suffix == ".parquet":
        return read_parquet(path)
    raise ValueError(f"data_file {str(path)!r} has suffix {suffix!r}; use a .jsonl or .parquet file")


def hub_caches() -> list[Path]:
    """The folders a hub dataset's rows (and so their `patch`, the gold) are cached in on this host: `HF_HOME`
    (default `~/.cache/huggingface`, where the hub's and the datasets library's caches live) and, where set
    elsewhere, `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE` and `HF_DATASETS_CACHE`. The jail hides them all."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    found = [home] + [
        os.environ[v] for v in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE") if v in os.environ
    ]
    return [Path(path).expanduser().resolve() for path in found]


def read_hub(dataset: str, split: str) -> list[dict[str, Any]]:
    """Raw rows of a hub dataset split (needs `datasets` and a reachable hub)."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise ImportError(
            f"loading {dataset!r} from the Hugging Face hub needs `datasets`; install it with "
            "`pip install 'swe-gym[hub]'`, or set data_file to a local JSONL/parquet copy"
        ) from exc
    return [dict(row) for row in load_dataset(dataset, split=split)]
