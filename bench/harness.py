"""composer-agent's own overhead per turn, against the model's latency.

Runs real verifiers rollouts (subprocess runtime) against the scripted model server with a fixed per-request latency
and a script of cheap tool calls, and splits each turn's wall time into:

- model: time the loop waits on a model call (the server's latency plus the interception and HTTP on the way);
- tools: time running the turn's tool call in the runtime (one `bash`/`view`/... process);
- loop: everything else the harness does per turn (parsing, bookkeeping, context accounting).

`harness / latency` is the harness's own time per turn (tools + loop) as a fraction of the server's latency: the
cost of the agent loop relative to the model it drives. Compaction adds one summary call per compaction and is not
part of this measurement.

The turns axis runs one `bash` rollout per length (10, 100, 400 turns by default) and prints side by side what the
harness costs per turn as the conversation grows: the loop's own time plus its client's (building the request body,
parsing the reply), and, apart, the call overhead (the wait on a model call minus the server's latency: the client,
HTTP, verifiers' interception and the scripted server, which all handle the growing body). The target is a harness
time per turn that stays flat (400 turns within 2x of 10) and below 5% of a 500 ms model latency.

    python bench/harness.py [--turns 30] [--latencies 0.02,0.1,0.5] [--axis 10,100,400]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.agent_tasks import files_task, scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer, tool

TOOL_MIXES: dict[str, list[Reply]] = {
    "bash": [tool("bash", command="echo ok")],
    "view": [tool("view", path="module.py", start_line=1, end_line=40)],
    "mixed": [
        tool("view", path="module.py", start_line=1, end_line=40),
        tool("search", pattern="def f[0-9]+", path="."),
        tool("str_replace", path="module.py", old_str="return 0\n", new_str="return 0 \n"),
        tool("str_replace", path="module.py", old_str="return 0 \n", new_str="return 0\n"),
        tool("bash", command="wc -l module.py"),
    ],
}

MODULE = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))


async def measure(mix: str, latency: float, turns: int) -> dict[str, float]:
    calls = TOOL_MIXES[mix]
    script = [calls[i % len(calls)] for i in range(turns)] + [tool("finish")]
    with ScriptedModelServer(script, latency_s=latency) as server:
        harness = {"compaction": {"enabled": False}, "max_turns": turns + 1}
        agent = scripted_agent(server.base_url, server.model, harness)
        start = time.monotonic()
        trace = await agent.run(files_task("bench", {"module.py": MODULE}, {}))
        rollout = time.monotonic() - start
    if not trace.ok:
        raise RuntimeError(f"bench rollout failed: {trace.errors}")
    info = trace.info["composer_agent"]
    n = info["turns"]
    model = info["model_seconds"] / n
    tools = info["tool_seconds"] / n
    loop = (info["loop_seconds"] - info["model_seconds"] - info["tool_seconds"]) / n
    return {
        "turns": n,
        "rollout_s": rollout,
        "model_ms": model * 1e3,
        "interception_ms": (model - latency) * 1e3,
        "client_ms": info["client_seconds"] / n * 1e3,
        "tools_ms": tools * 1e3,
        "loop_ms": loop * 1e3,
        "ratio": (tools + loop) / latency if latency else float("inf"),
    }


async def runtime_floor(n: int = 30) -> float:
    """Milliseconds of one bare `runtime.run(["true"])` on the subprocess runtime: the floor under every tool call."""
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    try:
        await runtime.run(["true"], {})
        start = time.monotonic()
        for _ in range(n):
            await runtime.run(["true"], {})
        return (time.monotonic() - start) / n * 1e3
    finally:
        await runtime.stop()


def turns_axis(lengths: list[int], latency: float) -> None:
    rows = [asyncio.run(measure("bash", latency, n)) for n in lengths]
    harness = [r["loop_ms"] + r["client_ms"] for r in rows]
    print(f"\nturns axis (bash, server latency {latency * 1e3:.0f} ms), per turn:")
    print(f"{'turns':<28}" + "".join(f"{n:>10}" for n in lengths))
    for label, values in (
        ("loop ms", [r["loop_ms"] for r in rows]),
        ("client ms (request+reply)", [r["client_ms"] for r in rows]),
        ("harness ms (loop + client)", harness),
        ("call overhead ms", [r["interception_ms"] for r in rows]),
        ("tools ms (runtime)", [r["tools_ms"] for r in rows]),
        ("harness / 500 ms latency", [h / 500 for h in harness]),
    ):
        print(f"{label:<28}" + "".join(f"{v:>10.3f}" for v in values))
    print(f"harness at {lengths[-1]} turns / at {lengths[0]} turns: {harness[-1] / harness[0]:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30, help="tool-calling turns per rollout")
    parser.add_argument("--latencies", default="0.02,0.1,0.5", help="comma-separated scripted-server latencies (s)")
    parser.add_argument("--mixes", default=",".join(TOOL_MIXES), help=f"tool mixes among {', '.join(TOOL_MIXES)}")
    parser.add_argument("--axis", default="10,100,400", help="rollout lengths (turns) of the turns axis; empty: skip")
    parser.add_argument("--axis-latency", type=float, default=0.02, help="server latency (s) on the turns axis")
    args = parser.parse_args()
    latencies = [float(x) for x in args.latencies.split(",")]
    mixes = args.mixes.split(",")

    asyncio.run(measure("bash", 0.0, 3))  # warm-up: imports, interception server, first runtime
    header = (
        f"{'tools':>6} {'latency ms':>10} {'turns':>5} {'model ms':>9} {'intercept ms':>12} {'tools ms':>9} "
        f"{'loop ms':>8} {'harness/latency':>15}"
    )
    print(header)
    print("-" * len(header))
    for mix in mixes:
        for latency in latencies:
            r = asyncio.run(measure(mix, latency, args.turns))
            print(
                f"{mix:>6} {latency * 1e3:>10.0f} {r['turns']:>5.0f} {r['model_ms']:>9.1f} "
                f"{r['interception_ms']:>12.1f} "
                f"{r['tools_ms']:>9.1f} {r['loop_ms']:>8.2f} {r['ratio']:>15.3f}",
                flush=True,
            )
    if args.axis:
        turns_axis([int(x) for x in args.axis.split(",")], args.axis_latency)
    print(f"\nruntime floor: one bare runtime.run(['true']) takes {asyncio.run(runtime_floor()):.1f} ms here.")
    print("model = wait on a model call (latency + interception + HTTP); intercept = model - latency;")
    print("tools = tool execution in the runtime; loop = the rest of the harness; harness = tools + loop, per turn.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
