"""Sibling hints (composer_prime/algorithm/siblings.py): a successful trace of the group as a failed trace's hint.

Traces are real `vf.Trace` graphs (tests/support/traces.py); the scorer stands in for `InferencePool.score` and
records what it was asked, so each test sees the rendered hint text and which tokens got a reference."""

from __future__ import annotations

import asyncio

from composer_prime.algorithm.config import HintConfig
from composer_prime.algorithm.siblings import METRIC, annotate_siblings, donor_detail, sibling_targets
from tests.support.traces import SYSTEM, TASK, assistant, build_trace, exchange, five_step_trace, tool_call

PATCH = "diff --git a/m.py b/m.py\n-    return []\n+    return [xs[i : i + n] for i in range(0, len(xs), n)]"


def solved(patch: str | None = PATCH):
    trace = build_trace(
        [[SYSTEM, TASK, *exchange("a", "create", "Created m.py.", path="m.py"), assistant("done, tests pass")]],
        info={"patch": patch} if patch else {},
    )
    return trace


def run(traces, rewards, config):
    rendered: list[str] = []

    def render(role: str, text: str) -> list[int]:
        rendered.append(text)
        return [7, 7]

    async def score(ids: list[int]) -> list[float]:
        return [-0.25] * len(ids)

    stats = asyncio.run(annotate_siblings(traces, rewards, config, render, score))
    return stats, rendered


def test_failed_traces_of_a_group_with_a_success_get_its_diff_as_their_hint():
    good, bad, partly = solved(), five_step_trace(), five_step_trace()
    partly.nodes[2].reference_logprobs = [-0.1] * 3  # an evidence hint the episode already scored
    config = HintConfig(siblings=True, max_targets_per_trace=2)
    stats, rendered = run([good, bad, partly], [1.0, 0.0, 0.5], config)
    # bad: its two latest steps (finish at node 10, the failed run at node 8); partly: one slot left, its latest step
    assert [s.targets for s in stats] == [0, 2, 1]
    assert [n for n, node in enumerate(bad.nodes) if node.reference_logprobs is not None] == [8, 10]
    assert [n for n, node in enumerate(partly.nodes) if node.reference_logprobs is not None] == [2, 10]
    assert all(node.reference_logprobs is None for node in good.nodes)
    expected = "Another attempt at this same task succeeded. What it did:\n" + PATCH
    assert rendered == [expected] * 3
    assert [t.metrics[METRIC] for t in (good, bad, partly)] == [0.0, 2.0, 1.0]
    # the references are the target messages' sampled tokens only
    assert bad.nodes[8].reference_logprobs == [-0.25] * 3


def test_a_group_without_a_success_gets_none_and_the_switch_is_off_by_default():
    traces = [five_step_trace(), five_step_trace()]
    stats, rendered = run(traces, [0.0, 0.5], HintConfig(siblings=True))
    assert [s.targets for s in stats] == [0, 0] and rendered == []
    assert [t.metrics[METRIC] for t in traces] == [0.0, 0.0]
    traces = [solved(), five_step_trace()]
    stats, rendered = run(traces, [1.0, 0.0], HintConfig())
    assert [s.targets for s in stats] == [0, 0] and rendered == [] and METRIC not in traces[1].metrics
    # a lower bar for success makes the 0.5 trace the donor (its steps are tool calls only)
    assert donor_detail(five_step_trace(), 4) == "finish({})"
    assert [len(t) for t in sibling_targets([five_step_trace(), five_step_trace()], [0.5, 0.0],
                                             HintConfig(siblings=True, sibling_min_reward=0.5))] == [0, 2]  # fmt: skip


def test_without_a_diff_the_donor_lends_its_message_at_the_same_turn():
    donor = build_trace(
        [
            [
                SYSTEM,
                TASK,
                assistant("first I read m.py", tool_call("a", "view", path="m.py")),
                {"role": "tool", "tool_call_id": "a", "content": "def chunked(xs, n): ..."},
                assistant("then I wrote the loop"),
            ]
        ]  # fmt: skip
    )
    assert donor_detail(donor, 0) == 'first I read m.py\nview({"path": "m.py"})'
    assert donor_detail(donor, 1) == "then I wrote the loop"
    assert donor_detail(donor, 7) == "then I wrote the loop"  # past its last turn: its last message
    assert donor_detail(solved(), 0) == PATCH
    config = HintConfig(siblings=True, max_targets_per_trace=1, templates={"sibling": "Try: {detail}"})
    [[], [target]] = sibling_targets([donor, five_step_trace()], [1.0, 0.0], config)
    assert target.kind == "sibling" and target.node == 10 and target.text == "Try: then I wrote the loop"


def test_summary_turns_are_never_targets_and_long_donors_are_trimmed():
    from tests.unit.test_algorithm import compacted_trace

    config = HintConfig(siblings=True, max_targets_per_trace=8, max_hint_chars=200)
    [[], targets] = sibling_targets([solved("x" * 5000), compacted_trace()], [1.0, 0.0], config)
    assert 9 not in [t.node for t in targets]  # node 9 is the summary turn
    assert [t.node for t in targets] == [11, 6, 4, 2]
    assert all(len(t.text) <= 200 for t in targets)
