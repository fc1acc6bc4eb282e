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
    partly.nodes[10].reference_logprobs = [-0.1] * 3  # its latest step holds a hint of its own already
    partly.nodes[2].reference_logprobs = [-0.1] * 3
    config = HintConfig(siblings=True, max_targets_per_trace=2, sibling_targets_per_trace=2)
    stats, rendered = run([good, bad, partly], [1.0, 0.0, 0.5], config)
    # beside their own targets (their budget does not count): bad its two latest steps (finish at node 10, the
    # failed run at node 8); partly its two latest steps without a hint (8, 6)
    assert [s.targets for s in stats] == [0, 2, 2]
    assert [n for n, node in enumerate(bad.nodes) if node.reference_logprobs is not None] == [8, 10]
    assert [n for n, node in enumerate(partly.nodes) if node.reference_logprobs is not None] == [2, 6, 8, 10]
    assert all(node.reference_logprobs is None for node in good.nodes)
    expected = "Another attempt at this same task succeeded. What it did:\n" + PATCH
    assert rendered == [expected] * 4
    assert [t.metrics[METRIC] for t in (good, bad, partly)] == [0.0, 2.0, 2.0]
    assert bad.metrics["composer/algo/hint/sibling_tokens"] == 6.0  # 2 targets x 3 sampled tokens
    assert bad.metrics["composer/algo/hint/sibling_prefill_tokens"] > 0
    # the references are the target messages' sampled tokens only
    assert bad.nodes[8].reference_logprobs == [-0.25] * 3
    # the default budget is one sibling target per failed trace
    stats, _ = run([solved(), five_step_trace()], [1.0, 0.0], HintConfig(siblings=True))
    assert [s.targets for s in stats] == [0, 1]


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
    assert [
        len(t)
        for t in sibling_targets(
            [five_step_trace(), five_step_trace()], [0.5, 0.0], HintConfig(siblings=True, sibling_min_reward=0.5)
        )
    ] == [0, 1]


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
        ]
    )
    assert donor_detail(donor, 0) == 'first I read m.py\nview({"path": "m.py"})'
    assert donor_detail(donor, 1) == "then I wrote the loop"
    assert donor_detail(donor, 7) == "then I wrote the loop"  # past its last turn: its last message
    assert donor_detail(solved(), 0) == PATCH
    config = HintConfig(siblings=True, templates={"sibling": "Try: {detail}"})
    [[], [target]] = sibling_targets([donor, five_step_trace()], [1.0, 0.0], config)
    assert target.kind == "sibling" and target.node == 10 and target.text == "Try: then I wrote the loop"


def test_summary_turns_are_never_targets_and_long_diffs_keep_their_head_in_order():
    from tests.unit.algorithm.test_algorithm import compacted_trace

    config = HintConfig(siblings=True, sibling_targets_per_trace=8, max_hint_chars=300)
    hunks = "".join(
        f"@@ -{k},2 +{k},2 @@\n-    old_{k}()\n+    raise ValueError('n must be positive {k}')\n" for k in range(200)
    )
    diff = "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n" + hunks
    [[], targets] = sibling_targets([solved(diff), compacted_trace()], [1.0, 0.0], config)
    assert [t.node for t in targets] == [11, 6, 4, 2]  # node 9, the summary turn, is not one
    text = targets[0].text
    assert len(text) <= 300 and all(t.text == text for t in targets)
    assert text.startswith("Another attempt at this same task succeeded. What it did:\ndiff --git a/m.py b/m.py\n")
    assert "@@ -0,2 +0,2 @@\n-    old_0()\n" in text  # the first hunk whole, in order
    left = len(diff.strip()) - len(text.split("What it did:\n", 1)[1].split("\n[... ")[0])
    assert text.endswith(f"\n[... {left} more characters]")


def test_bad_settings_are_refused_naming_them():
    import pytest
    from pydantic import ValidationError

    for bad in ({"sibling_min_reward": float("nan")}, {"sibling_targets_per_trace": 0}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            HintConfig(siblings=True, **bad)
