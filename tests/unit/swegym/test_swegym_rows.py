"""SWE-Gym row validation and loading: every bad row is reported with its instance id, the rest loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swe_gym.rows import parse_rows, select_rows
from swe_gym.sources import read_file

from tests.support.swegym_repo import FAIL_TO_PASS, PASS_TO_PASS, write_jsonl

SHA = "a" * 40


def good(instance_id: str = "octo__proj-1", **overrides: object) -> dict:
    row = {
        "instance_id": instance_id,
        "repo": "octo/proj",
        "base_commit": SHA,
        "problem_statement": "it breaks",
        "patch": "diff --git a/p.py b/p.py\n",
        "test_patch": "diff --git a/tests/test_p.py b/tests/test_p.py\n",
        "FAIL_TO_PASS": json.dumps(FAIL_TO_PASS),
        "PASS_TO_PASS": json.dumps(PASS_TO_PASS),
        "version": "1.2",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
    }
    row.update(overrides)
    return row


def test_json_encoded_and_real_lists_both_parse() -> None:
    rows, errors = parse_rows([good("a__b-1"), good("a__b-2", FAIL_TO_PASS=FAIL_TO_PASS, PASS_TO_PASS=[])])
    assert errors == []
    assert rows[0].fail_to_pass == tuple(FAIL_TO_PASS) and rows[0].pass_to_pass == tuple(PASS_TO_PASS)
    assert rows[1].fail_to_pass == tuple(FAIL_TO_PASS) and rows[1].pass_to_pass == ()


def test_each_bad_row_is_reported_by_id_and_the_rest_loads() -> None:
    raws = [
        good("ok__1"),
        {k: v for k, v in good("missing__1").items() if k != "test_patch"},
        good("wrongtype__1", version=2.0),
        good("badsha__1", base_commit="abc123"),
        good("badlist__1", FAIL_TO_PASS="tests/test_a.py::test_x"),
        good("emptyf2p__1", FAIL_TO_PASS="[]"),
        good("badrepo__1", repo="not-a-repo"),
        {k: v for k, v in good().items() if k != "instance_id"},
        good("ok__1"),
        good("ok__2"),
    ]
    rows, errors = parse_rows(raws)
    assert [r.instance_id for r in rows] == ["ok__1", "ok__2"]
    found = {(e.instance_id, e.field) for e in errors}
    assert found == {
        ("missing__1", "test_patch"),
        ("wrongtype__1", "version"),
        ("badsha__1", "base_commit"),
        ("badlist__1", "FAIL_TO_PASS"),
        ("emptyf2p__1", "FAIL_TO_PASS"),
        ("badrepo__1", "repo"),
        (None, "instance_id"),
        ("ok__1", "instance_id"),
    }
    messages = {str(e) for e in errors}
    assert "instance 'missing__1': field 'test_patch': is missing" in messages
    assert any("instance 'wrongtype__1': field 'version': has type float" in m for m in messages)
    assert any(m.startswith("row 7 (no instance_id): field 'instance_id'") for m in messages)
    assert any("repeats an earlier row" in m for m in messages)


def test_all_problems_of_one_row_are_reported() -> None:
    _, errors = parse_rows([good("multi__1", patch=None, PASS_TO_PASS={"a": 1}, base_commit="Z" * 40)])
    assert {e.field for e in errors} == {"patch", "PASS_TO_PASS", "base_commit"}


def test_jsonl_with_an_unparseable_line_loads_the_others(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [good("a__1"), "{not json", good("a__2")])
    rows, errors = parse_rows(read_file(path))
    assert [r.instance_id for r in rows] == ["a__1", "a__2"]
    assert len(errors) == 1 and "line 2 of" in str(errors[0]) and "is not JSON" in str(errors[0])


def test_parquet_file_loads(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="parquet loading needs the optional pyarrow")
    import pyarrow as pa

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([good("a__1"), good("a__2", version=None)]), path)
    rows, errors = parse_rows(read_file(path))
    assert [r.instance_id for r in rows] == ["a__1"]
    assert [(e.instance_id, e.field) for e in errors] == [("a__2", "version")]


def test_unknown_file_type_and_missing_file_are_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_file(tmp_path / "nope.jsonl")
    (tmp_path / "rows.csv").write_text("x")
    with pytest.raises(ValueError, match="use a .jsonl or .parquet file"):
        read_file(tmp_path / "rows.csv")


def test_filters_by_repo_and_instance_id() -> None:
    rows, _ = parse_rows([good("a__x-1", repo="a/x"), good("a__x-2", repo="a/x"), good("b__y-1", repo="b/y")])
    assert [r.instance_id for r in select_rows(rows, repos=["a/x"])[0]] == ["a__x-1", "a__x-2"]
    kept, missing = select_rows(rows, instance_ids=["b__y-1", "c__z-9"])
    assert [r.instance_id for r in kept] == ["b__y-1"] and missing == ["c__z-9"]
    assert select_rows(rows, repos=["a/x"], instance_ids=["b__y-1"])[0] == []


def test_hub_loading_without_datasets_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dev install has `datasets` (the corpus tests load datasets with it): the import is hidden here, as a user
    without `swe-gym[hub]` sees it."""
    import sys

    from swe_gym.sources import read_hub

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'swe-gym\[hub\]'.*data_file"):
        read_hub("SWE-Gym/SWE-Gym-Lite", "train")
