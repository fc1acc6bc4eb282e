"""composer_prime.atomic: one rename, no temp file left behind, the mode a plain write would give."""

from __future__ import annotations

import os
import stat

import pytest

from composer_prime.atomic import write_atomic


def test_new_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.jsonl", "x")
        os.umask(0o077)
        write_atomic(tmp_path / "b.jsonl", b"y")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.jsonl").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.jsonl").stat().st_mode) == 0o600
    assert (tmp_path / "a.jsonl").read_text() == "x"


def test_replacing_keeps_the_targets_mode(tmp_path):
    target = tmp_path / "tasks.jsonl"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_target_and_no_temp_file(tmp_path):
    target = tmp_path / "tasks.jsonl"
    target.write_text("complete")

    with pytest.raises(TypeError):
        write_atomic(target, object())  # type: ignore[arg-type]  # fails inside the write, after the temp file exists
    assert target.read_text() == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]
