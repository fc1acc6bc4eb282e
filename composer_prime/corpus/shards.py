"""The parquet side of a Feature Deletion dataset (`dataset`): the two configs' schemas, how rows are cut into
shards and tarball row groups, and shards to and from bytes. pyarrow is imported only here, when a shard is written or
read, so that `composer-prime corpus-dataset --help` stays instant.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROW_GROUP_BYTES = 32 * 2**20
"""Tarball row groups are cut at about this size, so readers stream a shard instead of holding it whole."""


def plan(sizes: list[int], max_rows: int, max_bytes: int) -> list[range]:
    """Consecutive index ranges with at most `max_rows` items and `max_bytes` (a lone larger item gets its own)."""
    shards: list[range] = []
    start, total = 0, 0
    for index, size in enumerate(sizes):
        if index > start and (index - start >= max_rows or total + size > max_bytes):
            shards.append(range(start, index))
            start, total = index, 0
        total += size
    shards.append(range(start, len(sizes)))
    return shards


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or an ImportError naming the extra that installs them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise ImportError(
            "reading or writing a Feature Deletion dataset needs pyarrow; install it with "
            "`pip install 'composer-prime[corpus]'`",
            name="pyarrow",
        ) from exc
    return pyarrow, pyarrow.parquet


def to_parquet(rows: list[dict[str, Any]], schema: Any, row_group_rows: int | None = None) -> bytes:
    """One shard's bytes: text columns zstd-compressed, tarballs (already gzip) stored as they are."""
    pa, pq = pyarrow_modules()
    buffer = io.BytesIO()
    table = pa.Table.from_pylist(rows, schema=schema)
    compression = {name: ("none" if name == "tarball" else "zstd") for name in schema.names}
    pq.write_table(table, buffer, compression=compression, row_group_size=row_group_rows)
    return buffer.getvalue()


def schemas() -> tuple[Any, Any]:
    """The arrow schemas of the `tasks` and `bases` configs (columns: `dataset`'s module docstring)."""
    pa, _ = pyarrow_modules()
    text = pa.string()
    tasks = pa.schema(
        [
            (name, text)
            for name in (
                "task_id",
                "package",
                "name",
                "version",
                "source",
                "license",
                "image",
                "kind",
                "path",
                "qualname",
                "deletion",
                "prompt",
                "gold_patch",
            )
        ]
        + [("fail_to_pass", pa.list_(text)), ("pass_to_pass", pa.list_(text)), ("base", text), ("task", text)]
    )
    bases = pa.schema(
        [("package", text), ("base", text), ("sha256", text), ("size", pa.int64()), ("tarball", pa.binary())]
    )
    return tasks, bases


def read_rows(paths: list[Path], columns: list[str]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(shard file name, row number from 1, row) for every row of `paths`, read a few rows at a time."""
    _, pq = pyarrow_modules()
    for path in paths:
        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=64, columns=columns):
            for row in batch.to_pylist():
                number += 1
                yield path.name, number, row
