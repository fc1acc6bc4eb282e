"""`composer-prime corpus-dataset`: build the Feature Deletion corpus under `--out` into a Hugging Face dataset
(`composer_prime.corpus.dataset`). Exit status: 0 built cleanly; 1 built, but rows or packages were left out for bad
input (each named on stderr); 2 nothing built (bad flags, no corpus at `--out`)."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SHOWN_PROBLEMS = 20


class CorpusDatasetConfig(BaseModel):
    """What `composer-prime corpus-dataset` builds."""

    model_config = ConfigDict(extra="forbid")

    out: Path
    """The corpus folder `composer-prime mine-corpus --out` writes (it holds packages/<name>-<version>/); the
    dataset (README.md and data/) is written into it."""
    publish: bool = False
    """Keep only packages whose license, read from their metadata, allows redistribution (unknown or missing: left
    out, and the card says why). Set it before sharing the dataset."""
    shard_rows: int = Field(1000, ge=1)
    """Most rows in one parquet shard."""
    shard_bytes: int = Field(256 * 2**20, ge=1)
    """About the most bytes of row data in one parquet shard (a single larger tarball gets a shard of its own)."""


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config

    config = parse_config(
        CorpusDatasetConfig,
        argv,
        prog,
        description="Build a mined Feature Deletion corpus into a Hugging Face dataset.",
    )
    if not config.out.is_dir():
        print(f"{prog}: --out {config.out}: no such directory; pass the folder mine-corpus wrote", file=sys.stderr)
        return 2
    from composer_prime.corpus.dataset import DatasetInputError, build_dataset  # after --help and parsing

    try:
        report = build_dataset(
            config.out, publish=config.publish, shard_rows=config.shard_rows, shard_bytes=config.shard_bytes
        )
    except DatasetInputError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    for problem in report.problems[:SHOWN_PROBLEMS]:
        print(f"{prog}: left out: {problem}", file=sys.stderr)
    if len(report.problems) > SHOWN_PROBLEMS:
        print(f"{prog}: ... and {len(report.problems) - SHOWN_PROBLEMS} more left out", file=sys.stderr)
    for name, why in sorted(report.excluded.items()):
        print(f"{prog}: not published: packages/{name}: {why}", file=sys.stderr)
    return 1 if report.problems else 0
