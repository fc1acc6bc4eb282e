"""The composer algorithm's pure core (composer_prime.algorithm): advantages, replay credit, hint targets, prefill.

Traces are real `vf.Trace` graphs built by tests/support/traces.py: every node starts with SCAFFOLD (2) template
tokens, a sampled assistant node then has `tokens` sampled tokens (default 3), any other node 4 context tokens.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from pydantic import ValidationError

from composer_prime.algorithm.config import ComposerAlgoConfig, HintConfig, OutcomeConfig, ReplayConfig
from composer_prime.algorithm.credit import group_advantages, outcome_advantages, step_credit, token_advantages
from composer_prime.algorithm.hints import prefill_request, reference_for, score_hints, select_targets
from tests.support.traces import SCAFFOLD, SYSTEM, TASK, assistant, build_trace, exchange, tool_call

SUMMARY_REQUEST = {"role": "user", "content": "Summarise your progress."}
RESUMED = {"role": "user", "content": "<summary>edited m.py; test_chunk fails</summary>"}


def compacted_trace(info=None):
    """Two branches: [sys, task, a0 view->error, tool, a1 edit, tool, a2 pytest->fail, tool, summary req, a3 summary]
    and [sys, task, resumed, a4 (2 tokens) finish]. Node indices: a0=2, a1=4, a2=6, a3=9, a4=11."""
    return build_trace(
        [
            [
                SYSTEM,
                TASK,
                *exchange("a", "view", "Error: nope.py does not exist.", path="nope.py"),
                *exchange("b", "str_replace", "Edited m.py.", path="m.py", old_str="x", new_str="y"),
                *exchange("c", "bash", "FAILED tests/test_m.py::test_chunk\n[exit code 1]", command="pytest -q"),
                SUMMARY_REQUEST,
                assistant("edited m.py; test_chunk fails"),
            ],
            [SYSTEM, TASK, RESUMED, assistant("", tool_call("d", "finish"), tokens=2)],
        ],
        info=info,
    )


def teacher_info(steps, teachers=("t1", "t2", "t3"), **extra):
    return {"teacher": {"teachers": list(teachers), "steps": steps, "cost_usd": 0.01, "skipped": None, **extra}}


# --- channel 1: outcome --------------------------------------------------------------------------------------------


def test_outcome_advantage_is_reward_minus_group_mean():
    # mean = 0.5 -> [0.5, -0.5, -0.5, 0.5]; no std division, no length term (Dr. GRPO)
    assert outcome_advantages([1.0, 0.0, 0.0, 1.0], OutcomeConfig()) == [0.5, -0.5, -0.5, 0.5]
    # mean = 0.25 -> [0.75, -0.25, -0.25, -0.25], scaled by coef 2
    assert outcome_advantages([1.0, 0.0, 0.0, 0.0], OutcomeConfig(coef=2.0)) == [1.5, -0.5, -0.5, -0.5]
    # std of [1,0,0,1] around 0.5 is 0.5 -> centred / 0.5
    assert outcome_advantages([1.0, 0.0, 0.0, 1.0], OutcomeConfig(normalize_std=True)) == [1.0, -1.0, -1.0, 1.0]
    # equal rewards: zero credit, no division by a zero std
    assert outcome_advantages([0.3, 0.3], OutcomeConfig(normalize_std=True)) == [0.0, 0.0]
    assert outcome_advantages([], OutcomeConfig()) == []


# --- channel 3: replay ----------------------------------------------------------------------------------------------


def test_step_credit_aggregates_and_gates_on_agreement():
    info = teacher_info(
        [
            {"node": 2, "scores": {"t1": -1.0, "t2": -0.5, "t3": 0.0}, "hint": "view m.py, not nope.py"},
            {"node": 4, "scores": {"t1": 1.0, "t2": -1.0, "t3": 0.2}, "hint": None},
            {"node": 6, "scores": {"t1": 0.6}, "hint": None},
        ]
    )
    trace = compacted_trace(info)
    credit = step_credit(trace, ReplayConfig())
    # node 2: mean -0.5, signs (-,-,0): 2/3 agree >= 0.5; node 4: mean 0.0667, signs (+,-,+): 2/3 agree;
    # node 6: one teacher, agreement 1.
    assert credit.advantage == pytest.approx({2: -0.5, 4: 0.2 / 3, 6: 0.6})
    assert credit.agreement == pytest.approx([2 / 3, 2 / 3, 1.0])
    assert credit.hints == {2: "view m.py, not nope.py"}

    strict = step_credit(trace, ReplayConfig(min_agreement=1.0, min_teachers=2))
    assert strict.advantage == {}
    assert strict.skipped == {"low_agreement": 2, "too_few_teachers": 1}

    assert step_credit(trace, ReplayConfig(aggregate="median")).advantage == pytest.approx({2: -0.5, 4: 0.2, 6: 0.6})
    assert step_credit(trace, ReplayConfig(aggregate="min", min_agreement=0)).advantage == {2: -1.0, 4: -1.0, 6: 0.6}
    weighted = step_credit(
        compacted_trace(teacher_info(info["teacher"]["steps"], weights={"t1": 3.0, "t2": 1.0})),
        ReplayConfig(aggregate="weighted_mean"),
    )
    # node 2: (3*-1 + 1*-0.5 + 1*0) / 5 = -0.7; t3 has no weight -> 1.0
    assert weighted.advantage[2] == pytest.approx(-0.7)


@pytest.mark.parametrize(
    ("info", "reasons"),
    [
        ({"teacher": "scores"}, {"malformed_info": 1}),
        ({"teacher": {"steps": {"node": 2}}}, {"malformed_info": 1}),
        (teacher_info(["x", {"scores": {"t1": 1}}, {"node": "two", "scores": {}}]), {"malformed_step": 3}),
        (teacher_info([{"node": 3, "scores": {"t1": 1}}]), {"not_a_sampled_node": 1}),  # a tool message
        (teacher_info([{"node": 99, "scores": {"t1": 1}}]), {"not_a_sampled_node": 1}),
        (teacher_info([{"node": -1, "scores": {"t1": 1}}]), {"malformed_step": 1}),
        (
            teacher_info([{"node": 2, "scores": {"t1": 1}}, {"node": 2, "scores": {"t1": -1}}]),
            {"duplicate_step": 1},
        ),
        # a score outside [-1, 1], NaN, a bool or a string makes the whole step malformed (the hook's TeacherStep)
        (teacher_info([{"node": 2, "scores": {"t1": 1.5}}, {"node": 4, "scores": {"t1": 0.5}}]), {"malformed_step": 1}),
        (teacher_info([{"node": 2, "scores": {"t1": math.nan}}]), {"malformed_step": 1}),
        (teacher_info([{"node": 2, "scores": {"t1": True}}]), {"malformed_step": 1}),
        (teacher_info([{"node": 2, "scores": {"t1": "high"}}]), {"malformed_step": 1}),
        (teacher_info([{"node": 2, "scores": {"t1": 0.5}, "hint": 7}]), {"malformed_step": 1}),
        (teacher_info([{"node": 2, "scores": {"t1": 0.5, "zz": 1.0}}]), {"unknown_teacher": 1}),
        (teacher_info([{"node": 2, "scores": {"zz": 1.0}}]), {"unknown_teacher": 1, "too_few_teachers": 1}),
    ],
)
def test_malformed_teacher_info_skips_and_counts(info, reasons):
    credit = step_credit(compacted_trace(info), ReplayConfig())
    assert dict(credit.skipped) == reasons
    if reasons == {"unknown_teacher": 1}:
        assert credit.advantage == {2: 0.5}


def test_one_malformed_step_costs_that_step_only():
    info = teacher_info([{"node": 2, "scores": {"t1": 1.5}}, {"node": 4, "scores": {"t1": 0.5}, "hint": "ok"}])
    credit = step_credit(compacted_trace(info), ReplayConfig())
    assert credit.advantage == {4: 0.5} and credit.hints == {4: "ok"}


def test_no_teacher_info_is_outcome_only():
    credit = step_credit(compacted_trace(), ReplayConfig())
    assert credit.advantage == {} and not credit.skipped


def test_token_advantages_follow_compact_sampled_order_across_branches():
    trace = compacted_trace()
    # sampled nodes in node order: a0(3) a1(3) a2(3) a3 summary(3) a4(2) -> 14 tokens
    values = token_advantages(trace, 0.25, {4: -0.5, 11: 1.0}, replay_coef=0.5)
    assert values == [0.25] * 3 + [0.0] * 3 + [0.25] * 3 + [0.25] * 3 + [0.75] * 2


def test_group_advantages_cover_summary_turns_and_record_metrics():
    passing = compacted_trace(teacher_info([{"node": 4, "scores": {"t1": -1.0, "t2": -1.0}}]))
    passing.rewards = {}
    passing.record_reward("tests", 1.0)
    failing = compacted_trace()
    failing.record_reward("tests", 0.0)
    config = ComposerAlgoConfig(replay=ReplayConfig(replay_coef=0.2))
    first, second = group_advantages([passing, failing], config)
    # outcome: +0.5 / -0.5 on every sampled token, the summary turn (node 9) included; node 4 gets 0.5 + 0.2 * -1
    assert first == pytest.approx([0.5] * 3 + [0.3] * 3 + [0.5] * 8)
    assert second == [-0.5] * 14
    assert passing.metrics["composer/algo/replay/steps"] == 1.0
    assert passing.metrics["composer/algo/replay/coverage"] == pytest.approx(1 / 5)
    assert passing.metrics["composer/algo/outcome_advantage"] == 0.5
    off = group_advantages([passing, failing], ComposerAlgoConfig(replay=ReplayConfig(enabled=False)))
    assert off[0] == [0.5] * 14


# --- channel 2: hint targets ----------------------------------------------------------------------------------------


def test_targets_by_kind_priority_then_latest_and_capped():
    trace = compacted_trace()
    hints = {6: "run the failing test alone first"}
    targets = select_targets(trace, HintConfig(), hints)
    # default kinds: teacher_hint > edit_then_failure > tool_error; cap 2
    assert [(t.node, t.kind) for t in targets] == [(6, "teacher_hint"), (4, "edit_then_failure")]
    assert targets[0].text == "A reviewer of this step says: run the failing test alone first"
    assert "FAILED tests/test_m.py::test_chunk" in targets[1].text

    every = select_targets(trace, HintConfig(max_targets_per_trace=5, kinds=["tool_error", "test_failure"]), hints)
    assert [(t.node, t.kind) for t in every] == [(2, "tool_error"), (6, "test_failure")]
    custom = HintConfig(kinds=["tool_error"], templates={"tool_error": "Careful: {detail}"})
    assert select_targets(trace, custom, {})[0].text == "Careful: Error: nope.py does not exist."
    twice = build_trace(
        [
            [
                SYSTEM,
                TASK,
                *exchange("a", "view", "Error: one.py does not exist.", path="one.py"),
                *exchange("b", "view", "Error: two.py does not exist.", path="two.py"),
            ]
        ]
    )
    latest = select_targets(twice, HintConfig(kinds=["tool_error"], max_targets_per_trace=1), {})
    assert [t.node for t in latest] == [4]  # within a kind, the latest step first
    # the summary turn (node 9) is never a target, even with a teacher hint on it
    assert select_targets(trace, HintConfig(kinds=["teacher_hint"]), {9: "shorter"}) == []


def test_hint_config_errors_name_the_field_and_the_fix():
    with pytest.raises(ValidationError, match=r"hints.templates.tool_error .* has no \{detail\} placeholder"):
        HintConfig(templates={"tool_error": "no placeholder"})
    with pytest.raises(ValidationError, match="lists a kind twice"):
        HintConfig(kinds=["tool_error", "tool_error"])
    with pytest.raises(ValidationError, match="max_targets"):
        ComposerAlgoConfig.model_validate({"hints": {"max_targets": 3}})


def test_prefill_request_and_reference_mapping():
    trace = compacted_trace()
    target = select_targets(trace, HintConfig(kinds=["edit_then_failure"]), {})[0]
    assert target.node == 4
    hint_ids = [7, 7, 7]
    request = prefill_request(trace, target, hint_ids, "before_target")
    prefix = [t for i in (0, 1, 2, 3) for t in trace.nodes[i].token_ids]
    own = trace.nodes[4].token_ids
    assert request.token_ids == prefix + hint_ids + own
    assert request.target_start == len(prefix) + 3
    assert request.new_tokens == 3 + len(own)
    # one logprob per token; the target's scaffold (2) is not sampled, its 3 sampled tokens get -0.1, -0.2, -0.3
    scored = [0.0] + [-9.0] * (len(request.token_ids) - 1)
    start = request.target_start
    scored[start : start + len(own)] = [-5.0, -5.0, -0.1, -0.2, -0.3]
    assert reference_for(trace, request, scored) == [-0.1, -0.2, -0.3]
    with pytest.raises(ValueError, match="returned 3 logprobs"):
        reference_for(trace, request, [-1.0] * 3)
    scored[start + SCAFFOLD] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        reference_for(trace, request, scored)

    system = prefill_request(trace, target, hint_ids, "system_prefix")
    assert system.token_ids == hint_ids + prefix + own
    assert system.target_start == request.target_start and system.new_tokens == len(system.token_ids)


def test_score_hints_writes_only_target_tokens_and_counts_failures():
    trace = compacted_trace(teacher_info([{"node": 2, "scores": {"t1": -1.0}, "hint": "view m.py"}]))
    config = HintConfig(
        max_targets_per_trace=3, score_timeout_s=0.5, kinds=["teacher_hint", "edit_then_failure", "test_failure"]
    )
    rendered: list[tuple[str, str]] = []

    def render(role: str, text: str) -> list[int]:
        rendered.append((role, text))
        return [5] * (len(rendered) + 1)

    async def score(ids: list[int]) -> list[float]:
        if ids[-1] == trace.nodes[6].token_ids[-1]:  # the pool fails on the third target
            raise ConnectionError("policy pool unreachable")
        return [-0.25] * len(ids)

    stats = asyncio.run(score_hints(trace, config, {2: "view m.py"}, render, score))
    assert stats.targets == 2 and stats.tokens == 6
    assert dict(stats.skipped) == {"score_failed": 1}
    assert [role for role, _ in rendered] == ["user", "user", "user"]
    assert trace.nodes[2].reference_logprobs == [-0.25] * 3
    assert trace.nodes[4].reference_logprobs == [-0.25] * 3
    assert all(trace.nodes[i].reference_logprobs is None for i in (6, 9, 11))
    # sampling logprobs are -0.5 -> gap +0.25 on every hint token
    assert stats.ref_gap == [0.25] * 6
    # the wire stream of branch 0 (what trace_to_samples ships): hint values on targets, 0.0 everywhere else
    stream = trace.branches[0].reference_logprobs
    assert sum(1 for v in stream if v != 0.0) == 6

    slow_trace = compacted_trace()

    async def slow(ids: list[int]) -> list[float]:
        await asyncio.sleep(5)
        return [-1.0] * len(ids)

    slow_stats = asyncio.run(score_hints(slow_trace, HintConfig(score_timeout_s=0.05), {}, render, slow))
    assert slow_stats.targets == 0 and dict(slow_stats.skipped) == {"score_timeout": 2}
    assert all(node.reference_logprobs is None for node in slow_trace.nodes)


def test_annotate_hints_uses_teacher_hints_records_metrics_and_respects_off():
    from composer_prime.algorithm.hints import annotate_hints

    async def score(ids: list[int]) -> list[float]:
        return [-0.25] * len(ids)

    def render(role: str, text: str) -> list[int]:
        return [5, 5]

    trace = compacted_trace(teacher_info([{"node": 9, "scores": {"t1": -1.0}, "hint": "shorter"}]))
    config = ComposerAlgoConfig(hints=HintConfig(enabled=True, kinds=["teacher_hint", "tool_error"]))
    (stats,) = asyncio.run(annotate_hints([trace], config, render, score))
    # node 9 is the summary: its teacher hint is not a target; the failed tool call (node 2) is
    assert stats.targets == 1 and trace.nodes[2].reference_logprobs == [-0.25] * 3
    assert trace.metrics["composer/algo/hint/targets"] == 1.0
    off = compacted_trace()
    (none,) = asyncio.run(annotate_hints([off], ComposerAlgoConfig(hints=HintConfig(enabled=False)), render, score))
    assert none.targets == 0 and all(n.reference_logprobs is None for n in off.nodes)
