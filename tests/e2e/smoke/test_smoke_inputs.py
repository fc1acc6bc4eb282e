"""The smoke's eval set is held out: mined from the bundled repository beside the train tasks, never one of them,
function-level tasks first (`prepare.mine`, a real `composer-prime mine-features` run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from composer_prime.smoke.prepare import EVAL_TASKS, mine

pytestmark = pytest.mark.slow


def test_the_eval_tasks_are_held_out_function_level_first(tmp_path: Path) -> None:
    train = [t.data.name for t in mine(tmp_path, 3)]
    rows = [json.loads(line) for line in (tmp_path / "eval-tasks.jsonl").read_text().splitlines()]
    held_out = [row["task_id"] for row in rows]
    kinds = [row["feature"]["kind"] for row in rows]
    assert len(train) == 3 and len(held_out) == EVAL_TASKS
    assert not set(train) & set(held_out)
    assert kinds == ["function", "module"]  # the one function-level task left, then a module-level one
