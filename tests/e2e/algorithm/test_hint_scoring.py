"""Hint scoring off PRIME-RL's episode consumer (composer_prime/algorithm/scoring.py) against a real HTTP scorer on
127.0.0.1 that sleeps before answering (tests/support/prefill_server.py), called as PRIME-RL's `prefill_logprobs`
calls vLLM. The consumer is driven as `ComposerAlgorithm` is: `start` per arriving episode (`score_episode`), `wait`
per group (`score_group`)."""

from __future__ import annotations

import asyncio
import time

import httpx

from composer_prime.algorithm.config import ComposerAlgoConfig, HintConfig
from composer_prime.algorithm.scoring import ERROR_METRIC, HintScoring
from composer_prime.local.inference import prefill
from tests.support.prefill_server import PrefillServer
from tests.support.traces import five_step_trace

MODEL = "policy"


def render(role: str, text: str) -> list[int]:
    return [5, 6, 7]


def config(**hints: object) -> ComposerAlgoConfig:
    # one target per trace: the failed tool call of five_step_trace (node 2)
    return ComposerAlgoConfig(hints=HintConfig(enabled=True, kinds=["tool_error"], max_targets_per_trace=1, **hints))


async def consume(server: PrefillServer, algo: ComposerAlgoConfig, episodes: int) -> tuple[list, float, float]:
    """Episodes arrive one after another at the consumer; then their group is compiled. Returns the traces, the
    seconds the consumer spent handing the episodes over, and the seconds until the group's scores were in."""
    traces = [five_step_trace() for _ in range(episodes)]
    async with httpx.AsyncClient(timeout=60) as client:
        scoring = HintScoring(algo, render, lambda ids: prefill(client, server.url, MODEL, ids))
        start = time.perf_counter()
        for k, trace in enumerate(traces):
            scoring.start(f"episode-{k}", [trace])
        handed_over = time.perf_counter() - start
        assert scoring.in_flight == episodes
        await scoring.wait(f"episode-{k}" for k in range(episodes))
        assert scoring.in_flight == 0
        return traces, handed_over, time.perf_counter() - start


def test_episodes_score_concurrently_not_one_after_another():
    delay, episodes = 1.0, 8
    with PrefillServer(delay_s=delay) as server:
        traces, handed_over, wall = asyncio.run(consume(server, config(), episodes))
    assert handed_over < 0.1 * delay  # the consumer never waited on the pool
    assert wall < 2 * delay  # one round trip for all 8 episodes, not 8 x 1 s
    assert server.requests == episodes and server.max_active == episodes
    for trace in traces:
        assert trace.nodes[2].reference_logprobs == [-0.25] * 3
        assert trace.metrics["composer/algo/hint/targets"] == 1.0


def test_requests_in_flight_never_exceed_max_concurrent_scores():
    delay, episodes, limit = 0.3, 10, 3
    with PrefillServer(delay_s=delay) as server:
        traces, _, wall = asyncio.run(consume(server, config(max_concurrent_scores=limit), episodes))
    assert server.max_active == limit  # the bound holds across episodes, and is reached
    assert server.requests == episodes
    assert wall >= 4 * delay - 0.05  # ceil(10 / 3) = 4 waves
    assert all(t.metrics["composer/algo/hint/targets"] == 1.0 for t in traces)


def test_a_slow_pool_times_out_every_target_cleanly_and_counts_it():
    episodes, timeout = 4, 0.5
    with PrefillServer(delay_s=5.0) as server:
        traces, _, wall = asyncio.run(
            consume(server, config(score_timeout_s=timeout, max_concurrent_scores=2), episodes)
        )
    assert wall < 4 * timeout  # the group waited for the deadline (0.5 s), not for the pool (5 s)
    assert server.max_active == 2
    skipped = [{k.rsplit("/", 1)[1]: v for k, v in t.metrics.items() if "/skipped/" in k} for t in traces]
    # two held a slot and were not answered in time; two never got a slot before the deadline
    assert sorted(s.popitem()[0] for s in skipped) == [
        "queue_timeout",
        "queue_timeout",
        "score_timeout",
        "score_timeout",
    ]
    for trace in traces:
        assert trace.metrics["composer/algo/hint/targets"] == 0.0
        assert all(node.reference_logprobs is None for node in trace.nodes)


def test_a_scoring_bug_is_counted_on_the_episode_and_never_reaches_the_consumer():
    def broken_render(role: str, text: str) -> list[int]:
        raise KeyError("no such template variable")

    async def unreachable(ids: list[int]) -> list[float]:
        raise AssertionError("nothing is scored when the hint cannot be rendered")

    async def run() -> tuple[HintScoring, list]:
        scoring = HintScoring(config(), broken_render, unreachable)
        traces = [five_step_trace(), five_step_trace()]
        scoring.start("episode", traces)
        scoring.start("episode", traces)  # still in flight: nothing more is started
        assert scoring.in_flight == 1
        await scoring.wait(["episode", "never-started"])
        return scoring, traces

    scoring, traces = asyncio.run(run())
    assert scoring.in_flight == 0
    assert all(t.metrics == {ERROR_METRIC: 1.0} for t in traces)
    assert all(node.reference_logprobs is None for t in traces for node in t.nodes)
