"""`composer-prime swe-gym-prepare` builds local-mode snapshots and venvs ahead of a run, validating on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer_prime.cli import main
from tests.support.swegym_repo import build_toy_instance, local_task_config, write_jsonl


@pytest.mark.slow
def test_prepares_validates_and_reports_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toy = build_toy_instance(tmp_path / "src")
    unknown_base = dict(toy.row, instance_id="toy__calc-9", base_commit="0" * 40)
    rows = write_jsonl(tmp_path / "rows.jsonl", [toy.row, unknown_base])
    task_config = tmp_path / "task.json"
    task_config.write_text(json.dumps(local_task_config(tmp_path / "cache", toy.repo)))

    code = main(["swe-gym-prepare", "--data-file", str(rows), "--task-config", str(task_config), "--validate"])
    out = capsys.readouterr().out
    assert code == 1
    assert "[1/2] toy__calc-7: ready (toy__calc/0.1-" in out and ", valid in " in out
    assert "[2/2] toy__calc-9: FAILED: instance 'toy__calc-9': base_commit 0000000000" in out
    assert "swe-gym: 1 of 2 instances prepared and valid" in out

    code = main(
        ["swe-gym-prepare", "--data-file", str(rows), "--task-config", str(task_config), "--instance-id", "toy__calc-7"]
    )
    assert code == 0 and "swe-gym: 1 of 1 instances prepared" in capsys.readouterr().out
