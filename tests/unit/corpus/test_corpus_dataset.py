"""The Feature Deletion corpus as a Hugging Face dataset (composer_prime/corpus/dataset.py), built from real mined rows
(the bundled toolz 1.2.0 sample and its tarball) laid out as mine-corpus writes them, loaded back with
`datasets.load_dataset` and with the feature-deletion taskset."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest

from composer_prime import cli
from composer_prime.corpus.dataset import LOCK, build_dataset, patch_key, read_dataset
from composer_prime.corpus.dataset_card import card_files
from composer_prime.corpus.licenses import classify
from tests.support.corpus import SAMPLE, add_package, sample_rows
from tests.support.crash import Crash, crash_after

COMPOSE, IS_ARITY, EQUALITY = (row["task_id"] for row in sample_rows())
"""The sample's tasks: two in toolz/functoolz.py, one in toolz/sandbox/core.py."""


def older_release(rows: list[dict], version: str) -> list[dict]:
    """The same features mined from another release: new task ids, the code restored five lines lower."""

    def shift(match: re.Match) -> str:
        a, b, c, d = (int(group) for group in match.groups())
        return f"@@ -{a + 5},{b} +{c + 5},{d} @@"

    return [
        {
            **row,
            "task_id": row["task_id"].replace("1.2.0", version),
            "repo": f"toolz-{version}",
            "gold_patch": re.sub(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", shift, row["gold_patch"], flags=re.M),
        }
        for row in rows
    ]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """toolz 1.2.0 (BSD-3-Clause, two tasks, its own image), toolz 1.1.0 (the same two features, hunks moved), and
    a `sandbox` package holding the third task under a GPL license."""
    rows = sample_rows()
    out = tmp_path / "corpus"
    add_package(out, "toolz", "1.2.0", rows[:2], license="BSD-3-Clause", image="localhost/fd-toolz:1.2.0")
    add_package(
        out, "toolz", "1.1.0", older_release(rows[:2], "1.1.0"), license="BSD", image="localhost/fd-toolz:1.1.0"
    )
    add_package(out, "sandbox", "0.1", rows[2:], license="GPL-3.0-only", image="localhost/fd-sandbox:0.1")
    return out


def load_hf(out: Path, tmp_path: Path, config: str | None = None):
    import datasets

    return datasets.load_dataset(str(out), config, split="train", cache_dir=str(tmp_path / "hf-cache"))


def shards(out: Path) -> dict[Path, bytes]:
    return {path.relative_to(out): path.read_bytes() for path in (out / "data").rglob("*.parquet")}


def load_taskset(folder: Path):
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(folder)}})
    taskset = load_taskset(config.taskset)
    return taskset, {task.data.name: task for task in taskset}


def test_dataset_loads_with_datasets_and_names_image_package_and_license(corpus: Path, tmp_path: Path):
    report = build_dataset(corpus, publish=False, log=lambda line: None)
    assert (report.tasks, report.bases, report.problems) == (3, 2, [])
    tasks = load_hf(corpus, tmp_path)
    by_id = {row["task_id"]: row for row in tasks}
    assert sorted(by_id) == sorted([COMPOSE, IS_ARITY, EQUALITY])
    row = by_id[IS_ARITY]
    assert (row["package"], row["name"], row["version"], row["license"], row["image"]) == (
        "toolz-1.2.0",
        "toolz",
        "1.2.0",
        "BSD-3-Clause",
        "localhost/fd-toolz:1.2.0",
    )
    assert by_id[EQUALITY]["license"] == "GPL-3.0-only" and by_id[EQUALITY]["image"] == "localhost/fd-sandbox:0.1"
    assert json.loads(row["task"])["image"] == "localhost/fd-toolz:1.2.0"  # what the taskset reads
    assert row["fail_to_pass"] == json.loads(row["task"])["fail_to_pass"]
    assert {r["deletion"] for r in tasks} == {"whole"} and row["deletion"] == json.loads(row["task"])["feature"][
        "deletion"
    ]

    bases = load_hf(corpus, tmp_path, "bases")
    assert len(bases) == 2  # one per (package, tarball): the sample's state serves two packages
    tarball = SAMPLE.with_name(json.loads(SAMPLE.read_text().splitlines()[0])["base"]).read_bytes()
    assert {bytes(base["tarball"]) for base in bases} == {tarball}
    card = (corpus / "README.md").read_text()
    assert "| toolz | 1.2.0 | pypi | BSD-3-Clause | yes | 2 | 0 | localhost/fd-toolz:1.2.0 | 300 MiB |" in card
    assert "| sandbox | 0.1 | pypi | GPL-3.0-only | no | 1 | 0 |" in card
    assert "Local build: every package" in card


def test_no_two_tasks_share_a_gold_patch_and_the_newest_release_keeps_it(corpus: Path):
    assert patch_key(sample_rows()[0]["gold_patch"]) == patch_key(
        older_release(sample_rows(), "1.1.0")[0]["gold_patch"]
    )
    assert patch_key(sample_rows()[0]["gold_patch"]) != patch_key(sample_rows()[1]["gold_patch"])
    report = build_dataset(corpus, publish=False, log=lambda line: None)
    assert sorted(report.duplicates) == [
        (COMPOSE.replace("1.2.0", "1.1.0"), COMPOSE),
        (IS_ARITY.replace("1.2.0", "1.1.0"), IS_ARITY),
    ]
    tasks, errors = read_dataset(corpus)
    assert errors == [] and len({patch_key(item.task.gold_patch) for item in tasks}) == len(tasks) == 3
    card = (corpus / "README.md").read_text()
    assert "2 task(s) dropped as duplicates" in card and "| toolz | 1.1.0 | pypi | BSD-3-Clause | yes | 0 | 2 |" in card
    assert f"- `{IS_ARITY.replace('1.2.0', '1.1.0')}`: same gold patch or task_id as `{IS_ARITY}`" in card

    # Deterministic: the same packages, copied in the other order into another folder, give the same bytes.
    again = corpus.with_name("again")
    for folder in sorted((corpus / "packages").glob("*-*"), reverse=True):
        shutil.copytree(folder, again / "packages" / folder.name)
    build_dataset(again, publish=False, log=lambda line: None)
    assert shards(again) == shards(corpus) and len(shards(corpus)) == 4  # tasks and bases of two packages


def test_publish_keeps_only_packages_whose_license_allows_redistribution(corpus: Path, tmp_path: Path, capsys):
    add_package(corpus, "mystery", "2.0", older_release(sample_rows()[2:], "2.0"), license=None)
    add_package(
        corpus, "classic", "3.0", [], license=["License :: OSI Approved :: MIT License", "License :: OSI Approved"]
    )
    assert cli.main(["corpus-dataset", "--out", str(corpus), "--publish"]) == 0
    err = capsys.readouterr().err
    assert "corpus-dataset: not published: packages/mystery-2.0: no license in the package's metadata" in err
    assert "corpus-dataset: not published: packages/sandbox-0.1: SPDX expression 'GPL-3.0-only'" in err
    assert sorted(row["task_id"] for row in load_hf(corpus, tmp_path)) == sorted([COMPOSE, IS_ARITY])
    card = (corpus / "README.md").read_text()
    assert "## Excluded packages" in card and "Published build" in card
    assert "| mystery-2.0 | no license in the package's metadata |" in card
    assert "| sandbox-0.1 | SPDX expression 'GPL-3.0-only': not on the allowlist |" in card
    assert "| classic | 3.0 | pypi | MIT | yes | 0 | 0 |" in card


MIT_BODY = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
    'documentation files (the "Software"), to deal in the Software without restriction, including without limitation '
    "the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and "
    "to permit persons to whom the Software is furnished to do so, subject to the following conditions:\n\nThe above "
    "copyright notice and this permission notice shall be included in all copies or substantial portions of the "
    'Software.\n\nTHE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT '
    "NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO "
    "EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN "
    "ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR "
    "OTHER DEALINGS IN THE SOFTWARE."
)


@pytest.mark.parametrize(
    ("license", "allowed", "spdx"),
    [
        ("MIT", True, "MIT"),
        ("Apache-2.0 OR GPL-3.0-only", True, "Apache-2.0 OR GPL-3.0-only"),
        ("MIT AND GPL-2.0-only", False, "MIT AND GPL-2.0-only"),
        ("(MIT OR Apache-2.0) AND BSD-3-Clause", True, "(MIT OR Apache-2.0) AND BSD-3-Clause"),
        ("Apache-2.0 WITH LLVM-exception", True, "Apache-2.0 WITH LLVM-exception"),
        ("GPL-2.0-or-later WITH Classpath-exception-2.0", False, "GPL-2.0-or-later WITH Classpath-exception-2.0"),
        ("BSD", True, "BSD-3-Clause"),
        ("new BSD License", True, "BSD-3-Clause"),
        ("Apache License, Version 2.0", True, "Apache-2.0"),
        ("Python Software Foundation License", True, "PSF-2.0"),
        ("MIT License\n\nCopyright (c) 2020 X\n\n" + MIT_BODY, True, "MIT"),
        # the MIT text with a clause added, or cut short, is not MIT (a reviewer's Commons Clause read as MIT)
        (
            "Copyright (c) 2020 X\n\n" + MIT_BODY + "\nCommons Clause: you may not sell the Software.",
            False,
            "LicenseRef-unknown",
        ),
        ("Copyright (c) 2020 X\nYou may not redistribute it.\n" + MIT_BODY, False, "LicenseRef-unknown"),
        (
            "Permission is hereby granted, free of charge, to any person obtaining a copy of this software",
            False,
            "LicenseRef-unknown",
        ),
        (
            MIT_BODY.replace("IN THE SOFTWARE.", "IN THE SOFTWARE, except that you may not redistribute it."),
            False,
            "LicenseRef-unknown",
        ),
        # a License field and classifiers that disagree: every part must allow redistribution
        (["MIT", "License :: Other/Proprietary License"], False, "MIT AND LicenseRef-unknown"),
        (["BSD", "License :: OSI Approved :: BSD License"], True, "BSD-3-Clause"),
        (
            "Copyright (c) X. Redistribution and use in source and binary forms ... 3. All advertising materials "
            "mentioning",
            False,
            "LicenseRef-unknown",
        ),
        (
            "License :: OSI Approved :: BSD License\nLicense :: OSI Approved :: ISC License (ISCL)",
            True,
            "BSD-3-Clause AND ISC",
        ),
        (
            [
                "License :: OSI Approved :: MIT License",
                "License :: OSI Approved :: GNU General Public License v3 (GPLv3)",
            ],
            False,
            "MIT AND LicenseRef-unknown",
        ),
        (["License :: OSI Approved"], False, "LicenseRef-unknown"),
        ("Modified BSD License", True, "BSD-3-Clause"),  # jsonpointer 3.0.0's License field
        ("Proprietary", False, "Proprietary"),
        ("", False, "LicenseRef-unknown"),
        (None, False, "LicenseRef-unknown"),
    ],
)
def test_license_rule(license, allowed, spdx):
    verdict = classify(license)
    assert (verdict.allowed, verdict.license) == (allowed, spdx), verdict.reason


def test_taskset_trains_from_the_dataset_folder(corpus: Path):
    build_dataset(corpus, publish=False, shard_rows=1, log=lambda line: None)
    assert len(card_files(corpus).tasks) == 3  # one row per shard: every shard is read
    taskset, tasks = load_taskset(corpus)
    assert taskset.load_errors == () and sorted(tasks) == sorted([COMPOSE, IS_ARITY, EQUALITY])
    data = tasks[IS_ARITY].data
    assert data.image == "localhost/fd-toolz:1.2.0" and data.mined.image == "localhost/fd-toolz:1.2.0"
    assert base64.b64decode(data.base) == SAMPLE.with_name(data.mined.base).read_bytes()
    assert tasks[EQUALITY].data.image == "localhost/fd-sandbox:0.1"
    from_jsonl = load_taskset(SAMPLE)[1][IS_ARITY].data
    assert from_jsonl.mined.model_copy(update={"image": data.mined.image}) == data.mined


def test_taskset_reports_bad_dataset_rows_and_loads_the_rest(corpus: Path, caplog):
    import pyarrow.parquet as pq

    build_dataset(corpus, publish=False, log=lambda line: None)
    [shard] = [path for path in card_files(corpus).tasks if path.parent.name == "toolz-1.2.0"]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    base = json.loads(rows[0]["task"])["base"]
    rows[0]["task"] = rows[0]["task"].replace('"base":"', '"base":"gone-')
    broken = json.loads(rows[1]["task"])
    del broken["gold_patch"]
    rows[1]["task"] = json.dumps(broken)
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), shard)
    taskset, tasks = load_taskset(corpus)
    assert list(tasks) == [EQUALITY]
    assert taskset.load_errors == (
        f"{shard.name}: row 1 (task_id {rows[0]['task_id']!r}): base 'gone-{base}' of package 'toolz-1.2.0' is not "
        "in the bases config; rebuild the dataset with `composer-prime corpus-dataset`",
        f"{shard.name}: row 2 (task_id {rows[1]['task_id']!r}): field 'gold_patch' is missing",
    )
    with pytest.raises(FileNotFoundError, match=r"no dataset card \(README.md"):
        load_taskset(corpus / "packages")
    [lost] = [path for path in card_files(corpus).tasks if path.parent.name == "sandbox-0.1"]
    lost.unlink()
    with pytest.raises(ValueError, match=f"README.md names data/sandbox-0.1/{lost.name}, which is not in"):
        load_taskset(corpus)


def test_a_dataset_folder_without_pyarrow_names_the_extra(corpus: Path, monkeypatch):
    import sys

    build_dataset(corpus, publish=False, log=lambda line: None)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(
        ImportError,
        match=r"needs pyarrow and PyYAML \(pyarrow is missing\): `pip install 'feature-deletion\[dataset\]'`",
    ):
        load_taskset(corpus)


def test_a_crash_mid_build_leaves_the_previous_dataset(corpus: Path, tmp_path: Path):
    """The next build adds `sandbox` and loses toolz 1.2.0 (so 1.1.0's tasks are no longer duplicates): it writes
    four new shards and the card, and removes 1.2.0's shards. Killed between any two of those writes, the folder
    still loads as the previous dataset; a later build finishes the job."""
    (corpus / "packages" / "sandbox-0.1").rename(tmp_path / "sandbox-0.1")
    build_dataset(corpus, publish=False, log=lambda line: None)
    before = sorted(row["task_id"] for row in load_hf(corpus, tmp_path))
    assert before == sorted([COMPOSE, IS_ARITY])
    (tmp_path / "sandbox-0.1").rename(corpus / "packages" / "sandbox-0.1")
    shutil.rmtree(corpus / "packages" / "toolz-1.2.0")
    after = sorted([COMPOSE.replace("1.2.0", "1.1.0"), IS_ARITY.replace("1.2.0", "1.1.0"), EQUALITY])
    renames = 5
    for writes in range(renames):
        crashed = shutil.copytree(corpus, tmp_path / f"crash-{writes}")
        with crash_after(crashed, writes) as done, pytest.raises(Crash):
            build_dataset(crashed, publish=False, log=lambda line: None)
        assert done["done"] == writes
        assert sorted(item.task.task_id for item in read_dataset(crashed)[0]) == before
        assert sorted(row["task_id"] for row in load_hf(crashed, tmp_path / f"hf-{writes}")) == before
        build_dataset(crashed, publish=False, log=lambda line: None)  # the next run finishes the job
        assert sorted(item.task.task_id for item in read_dataset(crashed)[0]) == after
    with crash_after(corpus, None) as done:
        build_dataset(corpus, publish=False, log=lambda line: None)
    assert done["done"] == renames
    assert sorted(row["task_id"] for row in load_hf(corpus, tmp_path / "after")) == after
    named = card_files(corpus)
    on_disk = sorted(path for path in (corpus / "data").rglob("*") if path.is_file())
    assert on_disk == sorted(named.tasks + named.bases)  # nothing stale, no temp file
    assert not (corpus / "data" / "toolz-1.2.0").exists()


def test_builds_of_one_folder_take_turns(corpus: Path):
    """mine-corpus workers and a hand-run corpus-dataset may build one folder at once: the second waits."""
    import threading

    from filelock import FileLock

    reports = []
    with FileLock(corpus / "packages" / LOCK):
        builder = threading.Thread(target=lambda: reports.append(build_dataset(corpus, publish=False, log=print)))
        builder.start()
        builder.join(timeout=2.0)
        assert builder.is_alive() and not (corpus / "README.md").exists() and not (corpus / "data").exists()
    builder.join(timeout=60)
    assert not builder.is_alive() and reports[0].tasks == 3 and (corpus / "README.md").is_file()


def test_bad_package_folders_are_named_and_the_rest_is_built(corpus: Path, tmp_path: Path, capsys):
    rows = sample_rows()
    bad = older_release(rows, "0.9")
    del bad[0]["gold_patch"]
    bad[1]["base"] = "missing.tar.gz"
    folder = add_package(corpus, "toolz", "0.9", older_release(rows, "0.9"))
    (folder / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in bad) + "{not json\n")
    (corpus / "packages" / "nometa-1.0").mkdir()
    broken = add_package(corpus, "broken", "1.0", [])
    (broken / "package.json").write_text(json.dumps({"name": "broken", "source": "pypi"}))

    assert cli.main(["corpus-dataset", "--out", str(corpus)]) == 1
    err = capsys.readouterr().err
    prefix = "composer-prime corpus-dataset: left out: "
    assert f"{prefix}packages/broken-1.0/package.json: field 'version': Field required;" in err
    assert f"{prefix}packages/nometa-1.0: package.json is missing;" in err
    assert (
        f"{prefix}packages/toolz-0.9/tasks.jsonl: row 1 (task_id {bad[0]['task_id']!r}): field 'gold_patch' is missing"
        in err
    )
    assert (
        f"{prefix}packages/toolz-0.9/tasks.jsonl: row 2 (task_id {bad[1]['task_id']!r}): field 'base' = "
        "'missing.tar.gz': no such file in packages/toolz-0.9" in err
    )
    assert f"{prefix}packages/toolz-0.9/tasks.jsonl: row 4: not valid JSON" in err
    assert "Traceback" not in err
    # The valid row of toolz 0.9 repeats 1.2.0's sandbox task's patch: dropped; the dataset holds the rest.
    assert sorted(row["task_id"] for row in load_hf(corpus, tmp_path)) == sorted([COMPOSE, IS_ARITY, EQUALITY])
    capsys.readouterr()  # datasets' own progress lines

    assert cli.main(["corpus-dataset", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no packages/ folder; point --out at the folder `composer-prime mine-corpus --out` wrote" in err
    assert len(err.splitlines()) == 1

    nothing = tmp_path / "nothing"
    add_package(nothing, "sandbox", "0.1", sample_rows()[2:], license="GPL-3.0-only")
    (nothing / "packages" / "empty-1.0").mkdir()
    assert cli.main(["corpus-dataset", "--out", str(nothing), "--publish"]) == 2
    err = capsys.readouterr().err
    assert "no task to write from 2 package folder(s); the previous dataset, if any, is left as it was" in err
    assert "  sandbox-0.1: SPDX expression 'GPL-3.0-only': not on the allowlist" in err
    assert "  packages/empty-1.0: package.json is missing" in err
    assert not (nothing / "README.md").exists() and not (nothing / "data").exists()
