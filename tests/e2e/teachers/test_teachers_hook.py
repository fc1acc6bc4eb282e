"""The teacher hook against scripted teacher servers on 127.0.0.1: aggregation, agreement, timeouts, retries,
unreadable verdicts, the budget, the cache, the deadline, and the judge plugin inside verifiers' `Task.score`."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from composer_prime.teachers import TeacherInfo, TeachersConfig
from composer_prime.teachers.hook import score_trace
from tests.support.scripted_server import Reply, ScriptedModelServer
from tests.support.traces import five_step_trace

M = "composer/teacher/"


SELECTED = [2, 4, 8, 10]  # failures (tool_error, test_failure, edit_then_failure) then the last two steps


def verdict(score: float, hint: str | None = None) -> Reply:
    return Reply(content=json.dumps({"score": score, "hint": hint}), prompt_tokens=1000, completion_tokens=20)


def always(reply: Reply):
    return lambda request: reply


def teacher(server: ScriptedModelServer, name: str, **extra) -> dict:
    return {
        "name": name,
        "base_url": server.base_url,
        "model": f"{name}-model",
        "input_usd_per_mtok": 1.0,
        "output_usd_per_mtok": 10.0,
        "timeout_s": 5.0,
        "retry_backoff_s": 0.05,
        **extra,
    }


def config(tmp_path, teachers: list[dict], **extra) -> TeachersConfig:
    return TeachersConfig.model_validate({"teachers": teachers, "cache_dir": str(tmp_path / "cache"), **extra})


def run(trace, cfg):
    return asyncio.run(asyncio.wait_for(score_trace(trace, cfg), 60))


# one query: 1000 prompt tokens at $1/M + 20 completion tokens at $10/M
QUERY_USD = 1000 * 1.0 / 1e6 + 20 * 10.0 / 1e6


def test_three_teachers_aggregate_agree_and_cost(tmp_path):
    with (
        ScriptedModelServer(always(verdict(0.5))) as a,
        ScriptedModelServer(always(verdict(-0.5, "Run the failing test first."))) as b,
        ScriptedModelServer(always(verdict(1.0, "Fine."))) as c,
    ):
        cfg = config(tmp_path, [teacher(a, "a"), teacher(b, "b", weight=2.0), teacher(c, "c")])
        report = run(five_step_trace(), cfg)
        assert len(a.requests) == len(b.requests) == len(c.requests) == 4
    info = TeacherInfo.model_validate(report.info.model_dump(mode="json"))
    assert info.teachers == ["a", "b", "c"]
    assert info.weights == {"a": 1.0, "b": 2.0, "c": 1.0}
    # the algorithm's weighted mean of a step from this block: (0.5*1 - 0.5*2 + 1.0*1) / 4 = 0.125
    from composer_prime.algorithm.config import ReplayConfig
    from composer_prime.algorithm.credit import step_credit

    trace = five_step_trace()
    trace.info["teacher"] = report.info.model_dump(mode="json")
    credit = step_credit(trace, ReplayConfig(aggregate="weighted_mean", min_agreement=0.0))
    assert credit.advantage == {node: pytest.approx(0.125) for node in SELECTED}
    assert [s.node for s in info.steps] == SELECTED
    assert all(s.scores == {"a": 0.5, "b": -0.5, "c": 1.0} for s in info.steps)
    # the lowest score's hint: b (-0.5) before c (1.0)
    assert all(s.hint == "Run the failing test first." for s in info.steps)
    assert info.skipped is None
    assert info.cost_usd == pytest.approx(12 * QUERY_USD)
    # weighted mean (0.5*1 - 0.5*2 + 1.0*1) / 4 = 0.125; agreement 1 - mean(|1.0|, |0.5|, |1.5|) / 2 = 0.5
    assert report.score == pytest.approx(0.125)
    assert report.metrics[M + "agreement"] == pytest.approx(0.5)
    assert report.metrics[M + "steps_selected"] == 4 and report.metrics[M + "steps_scored"] == 4
    assert report.metrics[M + "teachers_answered"] == 3
    assert report.metrics[M + "queries"] == 12
    assert report.metrics[M + "input_tokens"] == 12_000 and report.metrics[M + "output_tokens"] == 240


def test_prompt_holds_task_context_step_and_outcome(tmp_path):
    with ScriptedModelServer(always(verdict(0.0))) as a:
        run(five_step_trace(), config(tmp_path, [teacher(a, "a")]))
        prompts = {r["messages"][1]["content"] for r in a.requests}
    (test_step,) = [p for p in prompts if "# The step to judge" in p and "pytest -q tests" in p.split("# The step")[1]]
    assert test_step.startswith("# Task\nImplement chunked().")
    assert "Error: missing.py does not exist." in test_step  # earlier turns verbatim (4 kept, 3 exist)
    assert "test_chunk - AssertionError" in test_step.split("# What the tools answered")[1]
    assert a.requests[0]["model"] == "a-model" and a.requests[0]["max_tokens"] == 256


def test_slow_teacher_is_dropped_and_the_hook_keeps_its_deadline(tmp_path):
    with (
        ScriptedModelServer(always(verdict(0.5))) as fast,
        ScriptedModelServer(always(verdict(-1.0)), latency_s=3.0) as slow,
    ):
        cfg = config(tmp_path, [teacher(fast, "fast"), teacher(slow, "slow", timeout_s=0.5, max_retries=1)])
        started = time.monotonic()
        report = run(five_step_trace(), cfg)
        elapsed = time.monotonic() - started
    assert elapsed < 2.5, elapsed  # two attempts of 0.5 s plus backoff, never the server's 3 s
    assert [s.scores for s in report.info.steps] == [{"fast": 0.5}] * 4
    assert report.metrics[M + "failed"] == 4 and report.metrics[M + "teachers_answered"] == 1
    assert "agreement" not in {k.removeprefix(M) for k in report.metrics}
    # a timed-out request was not answered, so it costs nothing
    assert report.info.cost_usd == pytest.approx(4 * QUERY_USD)


def test_hook_stops_at_the_rollout_scoring_timeout(tmp_path):
    with ScriptedModelServer(always(verdict(0.5)), latency_s=5.0) as slow:
        cfg = config(tmp_path, [teacher(slow, "slow", timeout_s=30.0)], margin_s=1.0)
        trace = five_step_trace()
        trace.agent.config.timeout.scoring = 4.0
        trace.timing.scoring.start = time.time() - 1.0  # one second of the scoring budget already used
        started = time.monotonic()
        report = run(trace, cfg)
        assert time.monotonic() - started < 3.5
    assert report.info.steps == []
    assert report.info.skipped.startswith("deadline of 2s reached: 4 queries unanswered")
    # in-flight queries count at their worst case: the server may bill them
    assert report.info.cost_usd > 0


def test_server_errors_are_retried_then_answered(tmp_path):
    answers = iter([Reply(status=500), Reply(status=429), verdict(0.25)] * 4)
    with ScriptedModelServer(lambda request: next(answers)) as flaky:
        cfg = config(tmp_path, [teacher(flaky, "flaky", max_concurrency=1)])
        report = run(five_step_trace(), cfg)
        assert len(flaky.requests) == 12
    assert [s.scores for s in report.info.steps] == [{"flaky": 0.25}] * 4
    assert report.metrics[M + "failed"] == 0 and report.metrics[M + "queries"] == 4


def test_client_errors_are_not_retried(tmp_path):
    with ScriptedModelServer(always(Reply(status=401, content="bad key"))) as denied:
        report = run(five_step_trace(), config(tmp_path, [teacher(denied, "denied")]))
        assert len(denied.requests) == 4
    assert report.info.steps == [] and report.metrics[M + "failed"] == 4


def test_unreadable_verdict_is_retried_strictly_once_then_dropped(tmp_path):
    def script(request):
        strict = "could not be read" in request["messages"][0]["content"]
        step = request["messages"][1]["content"].split("# The step to judge")[1]
        if "[tool call] view(" in step:  # garbage twice: dropped
            return Reply(content="I think this step is fine {score: high}")
        if "[tool call] finish(" in step and not strict:  # garbage once, then a fenced object: kept
            return Reply(content="Looks good overall.")
        if "[tool call] finish(" in step:
            return Reply(content='```json\n{"score": 0.75, "hint": null}\n```')
        return Reply(content='{"score": 2.0}' if not strict else '{"score": -0.25, "hint": "  "}')

    with ScriptedModelServer(script) as odd:
        report = run(five_step_trace(), config(tmp_path, [teacher(odd, "odd")]))
        assert len(odd.requests) == 8
    assert {s.node: s.scores["odd"] for s in report.info.steps} == {4: -0.25, 8: -0.25, 10: 0.75}
    assert all(s.hint is None for s in report.info.steps)
    assert report.metrics[M + "unparseable"] == 1


def cheap(server: ScriptedModelServer, name: str) -> dict:
    """Output-priced only: a query reserves 100 tokens at $10/M ($0.001) and is billed 20 ($0.0002)."""
    return teacher(server, name, input_usd_per_mtok=0.0, max_output_tokens=100, max_concurrency=1)


def test_budget_runs_out_mid_trace(tmp_path):
    with ScriptedModelServer(always(verdict(-0.5))) as a:
        # billed 0 -> reserve 0.001 ok; 0.0002 + 0.001 ok; 0.0004 + 0.001 > 0.0013 refused (twice)
        cfg = config(tmp_path, [cheap(a, "a")], budget={"usd_per_trace": 0.0013})
        report = run(five_step_trace(), cfg)
        assert len(a.requests) == 2
    assert [s.node for s in report.info.steps] == [2, 8]  # the failure steps went first
    assert report.info.skipped == "budget spent: 2 queries not sent"
    assert report.info.cost_usd == pytest.approx(0.0004)
    assert report.metrics[M + "budget_refused"] == 2


def test_run_budget_is_shared_through_the_ledger(tmp_path):
    ledger = tmp_path / "run" / "spend.json"
    with ScriptedModelServer(always(verdict(0.5))) as a:
        budget = {"usd_per_trace": None, "usd_per_run": 0.0019, "ledger": str(ledger)}
        cfg = config(tmp_path, [cheap(a, "a")], budget=budget, cache_dir=None)
        first = run(five_step_trace(), cfg)
        assert json.loads(ledger.read_text()) == pytest.approx(0.0008)
        # 0.0008 + 0.001 fits once; then 0.0010 + 0.001 > 0.0019
        second = run(five_step_trace(), cfg)
    assert len(first.info.steps) == 4 and first.info.skipped is None
    assert [s.node for s in second.info.steps] == [2]
    assert second.info.skipped == "budget spent: 3 queries not sent"
    assert json.loads(ledger.read_text()) == pytest.approx(0.0010)


def test_second_scoring_is_served_from_the_cache(tmp_path):
    with ScriptedModelServer(always(verdict(0.5, "ok"))) as a, ScriptedModelServer(always(verdict(-0.5))) as b:
        cfg = config(tmp_path, [teacher(a, "a"), teacher(b, "b")])
        first = run(five_step_trace(), cfg)
        second = run(five_step_trace(), cfg)
        assert len(a.requests) == len(b.requests) == 4
    assert first.info.cost_usd > 0 and second.info.cost_usd == 0.0
    assert second.info.steps == first.info.steps
    assert second.metrics[M + "cache_hits"] == 8 and second.metrics[M + "queries"] == 0
    assert second.metrics[M + "input_tokens"] == 0
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 8


def test_no_teachers_and_unreachable_teachers_never_raise(tmp_path):
    report = run(five_step_trace(), config(tmp_path, []))
    assert report.info.skipped == "no teachers configured" and report.info.steps == []
    dead = {
        "name": "dead",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "input_usd_per_mtok": 1,
        "output_usd_per_mtok": 1,
        "max_retries": 1,
        "retry_backoff_s": 0.01,
    }
    report = run(five_step_trace(), config(tmp_path, [dead]))
    assert report.info.steps == [] and report.metrics[M + "failed"] == 4 and report.info.cost_usd == 0.0
    report = run(object(), config(tmp_path, [dead]))
    assert report.info.skipped.startswith("hook error: AttributeError")


def test_concurrency_per_teacher_is_bounded(tmp_path):
    arrivals: list[float] = []

    def script(request):
        arrivals.append(time.monotonic())
        return verdict(0.5)

    with ScriptedModelServer(script, latency_s=0.4) as a:
        report = run(five_step_trace(), config(tmp_path, [teacher(a, "a", max_concurrency=2)]))
    assert len(report.info.steps) == 4
    # two in flight: the third request is sent only once one of the first two was answered (0.4 s later)
    assert arrivals[2] - arrivals[0] >= 0.35 and arrivals[3] - arrivals[1] >= 0.35
