"""Mining across machines (issue 43, line 5): `mine-corpus --shard K/N` takes a fixed share of the packages, and
`corpus-dataset --shards` merges the shard folders into the dataset a single run would have built, byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from composer_prime import cli
from composer_prime.corpus.config import CorpusConfig, planned
from composer_prime.corpus.dataset import build_dataset
from tests.support.corpus import add_package, sample_rows
from tests.unit.corpus.test_corpus_dataset import older_release, shards

PACKAGES = [f"pkg{i}=={i}.0" for i in range(12)]


def _folders(config: CorpusConfig) -> set[str]:
    return {Path(job["folder"]).name for job in planned(config)}


def test_shards_split_the_packages_once_each_and_stay_put_when_the_list_grows(tmp_path: Path) -> None:
    every = _folders(CorpusConfig(packages=PACKAGES, out=tmp_path))
    parts = [_folders(CorpusConfig(packages=PACKAGES, out=tmp_path, shard=f"{k}/3")) for k in (1, 2, 3)]
    assert set().union(*parts) == every and sum(map(len, parts)) == len(every) == 12
    assert all(parts)  # twelve packages over three shares: none empty
    grown = [_folders(CorpusConfig(packages=[*PACKAGES, "new==1.0"], out=tmp_path, shard=f"{k}/3")) for k in (1, 2, 3)]
    assert [part - {"new-1.0"} for part in grown] == parts
    with pytest.raises(ValidationError, match="K/N needs 1 <= K <= N"):
        CorpusConfig(packages=PACKAGES, out=tmp_path, shard="4/3")
    with pytest.raises(ValidationError, match="shard"):
        CorpusConfig(packages=PACKAGES, out=tmp_path, shard="1 of 3")


def _packages(out: Path, which: list[int]) -> None:
    rows = sample_rows()
    made = [
        lambda: add_package(out, "toolz", "1.2.0", rows[:2], license="BSD-3-Clause", image="localhost/fd-toolz:1.2.0"),
        lambda: add_package(out, "toolz", "1.1.0", older_release(rows[:2], "1.1.0"), license="BSD", image="x/t:1"),
        lambda: add_package(out, "sandbox", "0.1", rows[2:], license="GPL-3.0-only", image="localhost/fd-sandbox:0.1"),
    ]
    for index in which:
        made[index]()


def test_three_shard_folders_merge_into_the_single_runs_dataset(tmp_path: Path, capsys) -> None:
    single = tmp_path / "single"
    _packages(single, [0, 1, 2])
    build_dataset(single, publish=False)
    for k in range(3):
        _packages(tmp_path / f"shard-{k}", [k])
    merged = tmp_path / "merged"
    argv = ["corpus-dataset", "--out", str(merged), "--shards", *(str(tmp_path / f"shard-{k}") for k in range(3))]
    assert cli.main(argv) == 0
    assert "merged packages/sandbox-0.1 from" in capsys.readouterr().err
    assert shards(merged) == shards(single) and len(shards(single)) >= 2
    assert (merged / "README.md").read_text() == (single / "README.md").read_text()
    # a rerun with the same shards changes nothing; a shard whose copy of a package differs is refused
    assert cli.main(argv) == 0 and shards(merged) == shards(single)
    (tmp_path / "shard-0" / "packages" / "toolz-1.2.0" / "tasks.jsonl").write_text("")
    assert cli.main(argv) == 2
    assert "packages/toolz-1.2.0 differs from the one already in" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "shard-1" / "packages")
    assert cli.main(["corpus-dataset", "--out", str(merged), "--shards", str(tmp_path / "shard-1")]) == 2
    assert "no packages/ folder" in capsys.readouterr().err
