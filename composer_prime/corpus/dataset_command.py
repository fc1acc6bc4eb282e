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
    shards: list[Path] = []
    """Corpus folders that `mine-corpus --shard K/N` runs wrote (e.g. `--shards run-1 run-2 run-3`): their complete
    packages are copied into --out's packages/ first, so the dataset is the one a single run would have built."""


def merge_shards(out: Path, shards: list[Path]) -> list[str]:
    """Copy the complete packages (with package.json) of each shard folder into `out/packages/`, each atomically
    (copied beside, then renamed); a package already there with the same files is left. Returns one line per package
    copied; raises ValueError naming the package when two shards hold it with different files, or a shard is not a
    corpus folder."""
    import filecmp
    import shutil
    import tempfile

    from composer_prime.corpus.config import PACKAGE_FILE

    target = out / "packages"
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for shard in shards:
        if not (shard / "packages").is_dir():
            raise ValueError(f"--shards {shard}: no packages/ folder; pass the --out of a `mine-corpus --shard` run")
        for folder in sorted((shard / "packages").iterdir()):
            if not (folder / PACKAGE_FILE).is_file():
                continue  # not complete: that shard's run did not finish it
            there = target / folder.name
            if there.exists():
                same = filecmp.dircmp(folder, there)
                if same.left_only or same.right_only or same.diff_files or same.funny_files:
                    raise ValueError(
                        f"--shards {shard}: packages/{folder.name} differs from the one already in {target} "
                        "(mined twice?); keep one of them"
                    )
                continue
            scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=target))
            shutil.copytree(folder, scratch / folder.name)
            (scratch / folder.name).rename(there)
            scratch.rmdir()
            copied.append(f"merged packages/{folder.name} from {shard}")
    return copied


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import parse_config

    config = parse_config(
        CorpusDatasetConfig,
        argv,
        prog,
        description="Build a mined Feature Deletion corpus into a Hugging Face dataset.",
    )
    if config.shards:
        try:
            for line in merge_shards(config.out, config.shards):
                print(f"{prog}: {line}", file=sys.stderr)
        except (ValueError, OSError) as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
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
