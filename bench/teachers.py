"""The teacher hook's cost per trace, gated against ungated, on recorded 50+-turn rollouts.

Records `--traces` composer-agent rollouts (subprocess runtime, real tool calls and pytest runs) against a scripted
model that works on a small repository for `--turns` turns, with a different number of failed tool calls and failed
test runs per trace. Each trace is then replayed through the hook twice, with every step (ungated) and with the
default gating, by three scripted teachers on 127.0.0.1 that bill as the three real models of PRICES. Token counts
are the scripted servers' usage (request characters / 4, as the hook's own estimate), so the dollars are what those
prompts cost at the stated prices, give or take the real tokenizers. A third pass re-scores the gated selection
from the answer cache. No budget ceiling applies, so the raw cost shows.

    python bench/teachers.py [--traces 3] [--turns 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from composer_prime import evidence
from composer_prime.teachers import TeachersConfig
from composer_prime.teachers.hook import score_trace
from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer, tool

PRICES = {
    # name: (model, $ per million input tokens, $ per million output tokens), list prices published by the providers
    "gpt-4.1-mini": ("openai gpt-4.1-mini", 0.40, 1.60),
    "gemini-2.5-flash": ("google gemini-2.5-flash", 0.30, 2.50),
    "deepseek-v3.2": ("deepseek-chat (V3.2)", 0.28, 0.42),
}
HARD_FAILURES = ("tool_error", "test_failure")

CALC = (
    "".join(
        f'def f{i}(x: int, y: int = {i}) -> int:\n    """The {i}th combination of x and y."""\n'
        f"    total = 0\n    for k in range(x):\n        total += (k * {i} + y) % 7\n    return total + {i}\n\n\n"
        for i in range(40)
    )
    + "def mean(values: list[float]) -> float:\n"
    + '    """Arithmetic mean."""\n    return sum(values) / (len(values) + 1)\n'
)
TESTS = "import calc\n\n\ndef test_mean():\n    assert calc.mean([1.0, 2.0, 3.0]) == 2.0\n\n\n" + "".join(
    f"def test_f{i}():\n    assert calc.f{i}(0) == {i}\n\n\n" for i in range(40)
)

BENIGN = [
    tool("view", path="calc.py"),
    tool("search", pattern="def mean|len\\(values\\)", path="."),
    tool("view", path="test_calc.py", start_line=1, end_line=40),
    tool("bash", command="wc -l calc.py test_calc.py && git status --short"),
    tool("str_replace", path="calc.py", old_str='"""Arithmetic mean."""', new_str='"""Arithmetic mean of values."""'),
    tool("str_replace", path="calc.py", old_str='"""Arithmetic mean of values."""', new_str='"""Arithmetic mean."""'),
]
FAILING = [
    tool("bash", command="python -m pytest -q test_calc.py"),  # fails until the fix
    tool("view", path="src/calc.py"),  # no such file
    tool("str_replace", path="calc.py", old_str="return sum(values) / len(values)", new_str="pass"),  # not found
    tool("bash", command="python -c 'import calc; calc.median([1])'"),  # traceback
]
FIX = [
    tool("str_replace", path="calc.py", old_str="(len(values) + 1)", new_str="len(values)"),
    tool("bash", command="python -m pytest -q test_calc.py"),
    tool("finish", message="mean() fixed"),
]


def script(turns: int, failures: int) -> list[Reply]:
    """`turns` tool calls: benign ones with `failures` failing ones spread evenly, ending with the fix and finish."""
    body = turns - len(FIX)
    every = max(1, body // max(1, failures))
    calls, failed = [], 0
    for i in range(body):
        if failed < failures and i % every == every // 2:
            calls.append(FAILING[failed % len(FAILING)])
            failed += 1
        else:
            calls.append(BENIGN[i % len(BENIGN)])
    return calls + FIX


async def record(turns: int, failures: int):
    with ScriptedModelServer(script(turns, failures)) as server:
        agent = scripted_agent(server.base_url, server.model, {"compaction": {"enabled": False}}, max_turns=turns + 5)
        task = files_task("Make test_calc.py pass: mean() is wrong.", {"calc.py": CALC, "test_calc.py": TESTS}, {})
        trace = await agent.run(task)
    if not trace.ok:
        raise RuntimeError(f"bench rollout failed: {trace.errors}")
    return trace


def verdict(request: dict) -> Reply:
    step = request["messages"][-1]["content"].split("# The step to judge")[-1]
    bad = "Error" in step or "[exit code 1]" in step or "[exit code 2]" in step
    body = {"score": -0.5, "hint": "Read the failing test's assertion before editing."} if bad else {"score": 0.5}
    return Reply(content=json.dumps(body))


def config(servers: dict[str, ScriptedModelServer], cache: Path | None, gated: bool) -> TeachersConfig:
    teachers = [
        {
            "name": name,
            "base_url": servers[name].base_url,
            "model": model,
            "input_usd_per_mtok": pin,
            "output_usd_per_mtok": pout,
            "max_concurrency": 16,
        }
        for name, (model, pin, pout) in PRICES.items()
    ]
    gating = {} if gated else {"enabled": False, "max_steps": 4096}
    return TeachersConfig.model_validate(
        {"teachers": teachers, "gating": gating, "budget": {"usd_per_trace": None}, "cache_dir": cache}
    )


def worst_case_usd(config: TeachersConfig) -> float:
    """The most a gated trace can cost without retries: `max_steps` steps, each teacher sent the largest prompt the
    context settings allow (task and trajectory within `context_tokens`, the step and its tool output each within
    `message_chars`, the instruction) and answering `max_output_tokens`. Strict retries of unreadable answers come on
    top; the per-trace budget (`usd_per_trace`, $0.15 by default) bounds them too."""
    prompt = config.context.context_tokens + 2 * config.context.message_chars // 4 + 300
    per_step = sum(t.cost_usd(prompt, t.max_output_tokens) for t in config.teachers)
    return config.gating.max_steps * per_step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=3, help="recorded rollouts")
    parser.add_argument("--turns", type=int, default=60, help="tool-calling turns per rollout (50+)")
    args = parser.parse_args()

    failure_counts = [4 + 4 * k for k in range(args.traces)]
    traces = [asyncio.run(record(args.turns, n)) for n in failure_counts]
    print("price table ($ per million tokens, input / output):")
    for name, (model, pin, pout) in PRICES.items():
        print(f"  {name:<17} {model:<26} {pin:>5.2f} / {pout:>5.2f}")
    header = (
        f"\n{'trace':>5} {'turns':>5} {'fail':>4} | {'mode':<8} {'steps':>5} {'queries':>7} {'in tok':>9} "
        f"{'out tok':>8} {'$':>8} {'fail scored':>11}"
    )
    print(header)
    print("-" * len(header))
    servers = {name: ScriptedModelServer(verdict, model=name).start() for name in PRICES}
    totals: dict[str, float] = {"gated": 0.0, "ungated": 0.0, "cached": 0.0}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for t, trace in enumerate(traces):
                steps = evidence.steps(trace)
                hard = {s.node for s in steps if any(f.kind in HARD_FAILURES for f in s.failures)}
                modes = [("ungated", None, False), ("gated", Path(tmp) / f"cache{t}", True)]
                modes.append(("cached", Path(tmp) / f"cache{t}", True))
                for mode, cache, gated in modes:
                    report = asyncio.run(score_trace(trace, config(servers, cache, gated)))
                    m = {k.rsplit("/", 1)[-1]: v for k, v in report.metrics.items()}
                    scored = {s.node for s in report.info.steps}
                    totals[mode] += report.info.cost_usd
                    lead = f"{t:>5} {len(steps):>5} {len(hard):>4}" if mode == "ungated" else " " * 16
                    print(
                        f"{lead} | {mode:<8} {len(scored):>5} {m['queries']:>7.0f} {m['input_tokens']:>9.0f} "
                        f"{m['output_tokens']:>8.0f} {report.info.cost_usd:>8.4f} {len(hard & scored):>6}/{len(hard)}"
                    )
        ceiling = worst_case_usd(config(servers, None, True))
    finally:
        for server in servers.values():
            server.stop()
    n = len(traces)
    print(
        f"\nmean $ per trace with 3 teachers: ungated {totals['ungated'] / n:.4f}, gated {totals['gated'] / n:.4f} "
        f"({totals['gated'] / max(totals['ungated'], 1e-12):.1%} of ungated), "
        f"re-scored from cache {totals['cached'] / n:.4f}"
    )
    print(
        "turns = sampled steps; fail = steps ending in a failed tool call or test run; fail scored = of those, scored."
    )
    print(f"gated ceiling by construction: at most ${ceiling:.4f} per trace at these prices (no retries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
