"""`swe-gym-prepare` builds local-mode snapshots and venvs ahead of a run, validating on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swe_gym.prepare import main

from tests.support.swegym_repo import build_toy_instance, local_task_config, write_jsonl


@pytest.mark.slow
def test_prepares_validates_and_reports_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toy = build_toy_instance(tmp_path / "src")
    unknown_base = dict(toy.row, instance_id="toy__calc-9", base_commit="0" * 40)
    rows = write_jsonl(tmp_path / "rows.jsonl", [toy.row, unknown_base])
    task_config = tmp_path / "task.json"
    task_config.write_text(json.dumps(local_task_config(tmp_path / "cache", toy.repo)))

    code = main(["--data-file", str(rows), "--task", "@", str(task_config), "--validate-gold"])
    out = capsys.readouterr().out
    assert code == 1
    assert "[1/2] toy__calc-7: ready (toy__calc/0.1-" in out and ", valid in " in out
    assert "[2/2] toy__calc-9: FAILED: instance 'toy__calc-9': base_commit 0000000000" in out
    assert "swe-gym: 1 of 2 instances prepared and valid" in out

    code = main(["--data-file", str(rows), "--task", "@", str(task_config), "--instance-ids", "toy__calc-7"])
    assert code == 0 and "swe-gym: 1 of 1 instances prepared" in capsys.readouterr().out


def test_bad_input_is_a_clear_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-file", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl does not exist" in err and "Traceback" not in err
    assert main(["--dataset", "SWE-Gym/SWE-Gym-Lite", "--data-file", str(tmp_path)]) == 2
    assert "exactly one source of rows" in capsys.readouterr().err
    bad = tmp_path / "typo.toml"
    bad.write_text("[local]\nrepo_sourcez = {}\n")
    rows = write_jsonl(tmp_path / "rows.jsonl", [])
    assert main(["--data-file", str(rows), "--task", "@", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "repo-sourcez" in err and "did you mean --task.local.repo-sources" in err and "Traceback" not in err
