"""The teacher hook's pure parts: config errors, the info schema, gating, step prompts and verdict parsing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from composer_prime.evidence import steps
from composer_prime.teachers import GatingConfig, TeacherInfo, TeachersConfig
from composer_prime.teachers.config import ContextConfig
from composer_prime.teachers.gating import select
from composer_prime.teachers.hook import agreement
from composer_prime.teachers.prompts import Rendered, parse_verdict, render_context, step_messages
from tests.support.traces import assistant, build_trace, tool, tool_call

TEACHER = {
    "name": "t",
    "base_url": "http://127.0.0.1:1/v1",
    "model": "m",
    "input_usd_per_mtok": 1,
    "output_usd_per_mtok": 2,
}


def errors(raw: dict) -> str:
    with pytest.raises(ValidationError) as e:
        TeachersConfig.model_validate(raw)
    return str(e.value)


def test_config_errors_name_field_value_and_fix():
    text = errors({"teachers": [dict(TEACHER, base_url="api.openai.com")]})
    assert "teachers.0.base_url" in text and "'api.openai.com' is not an http(s) URL" in text and "set it to" in text
    text = errors({"teachers": [TEACHER, TEACHER]})
    assert "teacher names ['t'] appear more than once; give each teacher a distinct `name`" in text
    text = errors({"teachers": [dict(TEACHER, timeout_s=0)]})
    assert "teachers.0.timeout_s" in text and "greater than 0" in text
    text = errors({"budget": {"ledger": "/tmp/spend.json"}})
    assert "ledger = '/tmp/spend.json' is set but usd_per_run is None; set usd_per_run or remove ledger" in text
    assert "teachers.0.weigth" in errors({"teachers": [dict(TEACHER, weigth=2)]})  # a typo is refused, not ignored
    blank = TeachersConfig.model_validate(
        {"cache_dir": "", "budget": {"usd_per_trace": ""}, "gating": {"low_logprob": ""}}
    )
    assert blank.cache_dir is None and blank.budget.usd_per_trace is None and blank.gating.low_logprob is None
    assert "input_usd_per_mtok" in errors(
        {"teachers": [{k: v for k, v in TEACHER.items() if k != "input_usd_per_mtok"}]}
    )


def test_schema_refuses_out_of_range_scores_duplicates_and_unknown_teachers():
    good = {
        "teachers": ["a", "b"],
        "weights": {"a": 2.0},
        "steps": [{"node": 3, "scores": {"a": 1.0, "b": -1.0}, "hint": None}],
        "cost_usd": 0.01,
        "skipped": None,
        "errors": {},
    }
    assert TeacherInfo.model_validate(good).model_dump(mode="json") == good
    with pytest.raises(ValidationError, match="outside"):
        TeacherInfo.model_validate({**good, "steps": [{"node": 3, "scores": {"a": 1.5}}]})
    with pytest.raises(ValidationError, match="more than once"):
        TeacherInfo.model_validate({**good, "steps": good["steps"] * 2})
    with pytest.raises(ValidationError, match="not in `teachers`"):
        TeacherInfo.model_validate({**good, "steps": [{"node": 3, "scores": {"c": 0.0}}]})
    with pytest.raises(ValidationError, match="unknown teachers or are not > 0"):
        TeacherInfo.model_validate({**good, "weights": {"c": 1.0}})
    with pytest.raises(ValidationError, match="unknown teachers or are not > 0"):
        TeacherInfo.model_validate({**good, "weights": {"a": 0.0}})
    with pytest.raises(ValidationError):
        TeacherInfo.model_validate({**good, "extra": 1})


def test_schema_imports_pydantic_only():
    code = (
        "import composer_prime.teachers.schema, sys; print(sorted({'torch', 'verifiers', 'httpx'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


SYSTEM = {"role": "system", "content": "sys"}
TASK = {"role": "user", "content": "Fix it."}


def long_trace(n: int, fail_at: set[int], logprob_at: dict[int, float] | None = None):
    branch = [SYSTEM, TASK]
    for i in range(n):
        branch.append(
            assistant(
                "",
                tool_call(f"c{i}", "bash", command=f"python -m pytest -q t{i}"),
                logprob=(logprob_at or {}).get(i, -0.1),
            )
        )
        branch.append(tool(f"c{i}", f"run {i}\n[exit code {1 if i in fail_at else 0}]"))
    branch.append(assistant("done", logprob=-0.1))
    return build_trace([branch])


def test_gating_takes_failures_then_final_then_unsure_up_to_k():
    trace = long_trace(10, fail_at={1, 4}, logprob_at={6: -3.0, 7: -1.5})
    found = steps(trace)
    node = {s.turn: s.node for s in found}
    chosen = [s.node for s in select(found, GatingConfig())]
    assert chosen == [node[1], node[4], node[10], node[9], node[6], node[7]]
    assert [s.node for s in select(found, GatingConfig(max_steps=3))] == [node[1], node[4], node[10]]
    assert [s.node for s in select(found, GatingConfig(low_logprob=None, final_steps=0))] == [node[1], node[4]]
    assert [s.node for s in select(found, GatingConfig(enabled=False))] == [node[t] for t in range(11)]


def test_context_keeps_task_recent_turns_and_marks_the_elision():
    history = [Rendered("assistant", f"step {i}") if i % 2 == 0 else Rendered("tool", f"out {i}") for i in range(20)]
    text = render_context("Do the thing.", history, ContextConfig(recent_turns=3))
    assert text.startswith("# Task\nDo the thing.")
    assert "[... 7 earlier turn(s) elided ...]" in text
    assert "step 14" in text and "out 19" in text and "step 12" not in text
    assert text.index("step 14") < text.index("step 16") < text.index("step 18")


def test_context_fits_the_token_budget_with_huge_messages():
    history = [Rendered("assistant", "a" * 50_000), Rendered("tool", "b" * 50_000)] * 6
    config = ContextConfig(context_tokens=1000, recent_turns=4, message_chars=1500)
    text = render_context("t" * 10_000, history, config)
    assert len(text) <= 1000 * 4 + 200
    assert "earlier turn(s) elided" in text and "characters truncated" in text
    messages = step_messages("task", history, Rendered("assistant", "x" * 9000), [], config, strict=True)
    assert "could not be read" in messages[0]["content"]
    assert "(no tool output: the step ended the episode)" in messages[1]["content"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 0.5, "hint": "Run the tests."}', (0.5, "Run the tests.")),
        ('Sure.\n```json\n{"score": -1, "hint": null}\n```', (-1.0, None)),
        ('{"score": 0.2, "hint": "   "}', (0.2, None)),
        ('{"score": 1.5}', None),
        ('{"score": NaN}', None),
        ('{"score": "high"}', None),
        ("score: 0.5", None),
        ("", None),
    ],
)
def test_parse_verdict(text, expected):
    verdict = parse_verdict(text)
    assert (None if verdict is None else (verdict.score, verdict.hint)) == expected


def test_agreement_by_hand():
    # step 1: |0.5-(-0.5)|=1, |0.5-1|=0.5, |-0.5-1|=1.5 -> mean 1.0 -> 0.5; step 2: identical -> 1.0; single: ignored
    assert agreement([[0.5, -0.5, 1.0], [0.2, 0.2], [1.0]]) == pytest.approx(0.75)
    assert agreement([[1.0]]) is None


def test_doc_toml_blocks_parse_into_env_configs():
    import re
    import tomllib
    from pathlib import Path

    from verifiers.v1.utils.loaders import resolve_env_config

    from composer_prime.teachers.judge import TeacherJudgeConfig

    doc = (Path(__file__).resolve().parents[3] / "docs" / "teachers.md").read_text()
    blocks = [tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", doc, re.DOTALL)]
    assert len(blocks) == 2
    source = blocks[0]["orchestrator"]["train"]["source"][0]
    config = resolve_env_config(source["env"])
    (judge,) = config.taskset.task.judges
    assert isinstance(judge, TeacherJudgeConfig) and judge.id == "composer-teachers" and judge.weight == 0.0
    assert [t.name for t in judge.teachers] == ["gpt-4.1-mini", "gemini-2.5-flash", "deepseek-v3.2"]
    assert judge.budget.usd_per_run == 500.0 and judge.gating.max_steps == 16
    task = blocks[1]["orchestrator"]["train"]["source"]["env"]["taskset"]["task"]
    config = resolve_env_config({"taskset": {"id": "feature-deletion", "task": task}})
    (judge,) = config.taskset.task.judges
    assert judge.teachers[0].max_concurrency == 64 and judge.teachers[0].api_key_var is None


def test_a_teacher_that_cannot_be_reached_leaves_its_first_error_and_url_on_the_trace(tmp_path, monkeypatch):
    import asyncio

    from composer_prime.process.ports import free_port
    from composer_prime.teachers.hook import score_trace
    from tests.support.traces import five_step_trace

    down = f"http://127.0.0.1:{free_port()}/v1"  # reserved, never bound: connection refused
    monkeypatch.setenv("COMPOSER_TEST_TEACHER_URL", down)
    config = TeachersConfig.model_validate(
        {
            "teachers": [
                {
                    "name": "down",
                    "base_url": "https://api.example.com/v1",
                    "base_url_var": "COMPOSER_TEST_TEACHER_URL",
                    "model": "m",
                    "input_usd_per_mtok": 1.0,
                    "output_usd_per_mtok": 1.0,
                    "retry_backoff_s": 0.01,
                    "max_retries": 1,
                },
            ],
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    report = asyncio.run(asyncio.wait_for(score_trace(five_step_trace(), config), 60))
    assert report.metrics["composer/teacher/failed"] > 0
    assert report.info.errors["down"].startswith(f"{down}: down: ConnectError")
    assert TeacherInfo.model_validate(report.info.model_dump(mode="json")).errors == report.info.errors


def test_an_unset_api_key_is_one_clear_error_naming_the_variable(tmp_path, monkeypatch):
    import asyncio

    from composer_prime.teachers.hook import score_trace
    from tests.support.scripted_server import Reply, ScriptedModelServer
    from tests.support.traces import five_step_trace

    monkeypatch.delenv("COMPOSER_TEST_TEACHER_KEY", raising=False)
    with ScriptedModelServer([Reply(content='{"score": 1.0}')]) as server:
        teacher = {"name": "t", "base_url": server.base_url, "model": "m", "api_key_var": "COMPOSER_TEST_TEACHER_KEY"}
        config = TeachersConfig.model_validate(
            {
                "teachers": [{**teacher, "input_usd_per_mtok": 1.0, "output_usd_per_mtok": 1.0}],
                "cache_dir": str(tmp_path / "c"),
            }
        )
        report = asyncio.run(asyncio.wait_for(score_trace(five_step_trace(), config), 60))
        assert server.requests == []  # nothing sent, nothing retried
    assert "$COMPOSER_TEST_TEACHER_KEY (its api_key_var) is not set" in report.info.errors["t"]
    assert report.metrics["composer/teacher/failed"] == report.metrics["composer/teacher/queries"] > 0
