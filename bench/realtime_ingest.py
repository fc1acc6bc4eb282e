"""The `realtime-sessions` source on a real asyncio event loop: how long it ever holds the loop, how fast it ingests,
how much memory and disk it keeps, at a 10k-session backlog and after 1M sessions of history (docs/realtime.md,
"Bounds").

Each scenario runs in a fresh process (so its peak RSS is its own) with the source as PRIME-RL's orchestrator holds
it: the taskset's stream, drawn from a dispatcher stand-in on the loop (every 10 ms it draws until the stream answers
`TaskNotReady` or 64 tasks are drawn, as `Dispatcher.fill_inflight` does each pass until its in-flight permits are
spent, without its 0.1-0.5 s sleep), while a ticker coroutine
asks to wake every 1 ms and records how late it woke: the worst loop lag. Every `--ckpt-every` bundles drawn a
PRIME-RL checkpoint is written as its orchestrator writes one (`step_N/orchestrator/progress.pt` with the sampler's
cursor; the previous step dir removed, `keep_last = 1`), so the journal forgets bundles as it would in a run.

- `backlog`: a fresh journal and a spool of `--backlog` sessions (each with an `edit` signal, ended an hour ago, out
  of the 600 s signal window), drained to the last bundle.
- `history`: `--history` sessions ingested the same way, a file of 10k sessions at a time, each drained before the
  next is written (each file retired once read and no longer the newest: `spool.retire_after_s = 0`), then the stream is closed and reopened (an orchestrator restart: the id memory of 1M
  sessions is loaded), left idle for a few polls, and a `--backlog` of new sessions is drained. Rates and lags are
  given for the ingest of the history and, after the restart, for the new backlog.

Session shapes (`--tokens`): 96 (64 context and 32 sampled tokens with logprobs, ~1.1 kB a line with its signal:
the source's own work per session), 1,200 (1,000 context + 200 sampled: a prompt, a file read, a JSON tool call)
and 20,000 (18,000 + 2,000); the longer ones decode to code and tool calls with the tiny test tokenizer (about 1.3
characters a token, a third of a production tokenizer's, so the secrets scan reads a third of the text it would).
A backlog was written at `RATE` sessions a second of the product's clock, each session's signal 30 s after it.
`--tokens 96 1200 20000 --backlog 10000 100000 --history 0` gives the table of docs/realtime.md.
State on disk is the journal folder (state.json, the id memory, bundles not yet forgotten, reads' records).

    python bench/realtime_ingest.py [--backlog 10000] [--history 1000000] [--out DIR]

About 15-20 minutes on 2 shared cores for the defaults (most of it the 1M ingest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_FILE = 10_000
TICK_S = 0.001
DRAW_EVERY_S = 0.01
INFLIGHT = 64
"""Draws per dispatcher pass at most (PRIME-RL's in-flight permits)."""


SHAPES = {96: (64, 32), 1200: (1000, 200), 20000: (18000, 2000)}
"""Tokens of a session -> (context, sampled): 96 the old small session; 1,200 an agent turn (a prompt and a file
read, a tool call and its answer); 20,000 a long agent session."""


def token_streams(tokens: int) -> tuple[list[int], list[int], list[dict]]:
    """(context ids, sampled ids, messages) of a session of `tokens` tokens: the 96-token shape is counting ids as
    before; the others decode to code and a JSON tool call (this repository's own source, tokenized with the tiny
    tokenizer), so the secrets scan reads text of the length the tokens make."""
    context_n, sampled_n = SHAPES[tokens]
    if tokens == 96:
        return list(range(1, 65)), list(range(100, 132)), []
    from transformers import AutoTokenizer

    from tests.support.tokenizer import tiny_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_tokenizer())
    source = "".join(p.read_text() for p in sorted((ROOT / "composer_prime" / "realtime").rglob("*.py")))
    call = json.dumps({"name": "edit", "arguments": {"path": "composer_prime/realtime/ingest/spool.py", "new": source}})
    text = f"<|im_start|>user\nFix the failing test.<|im_end|>\n<|im_start|>tool\n{source}\n"
    ids = tokenizer.encode(text * (1 + 4 * context_n // max(1, len(text))), add_special_tokens=False)[:context_n]
    out = tokenizer.encode(
        f"<tool_call>{call}</tool_call>" * (1 + 4 * sampled_n // len(call)), add_special_tokens=False
    )
    messages = [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "tool_calls": [{"function": {"name": "edit", "arguments": call[:4000]}}]},
    ]
    return ids, out[:sampled_n], messages


RATE = 20.0
"""Sessions a second the product wrote the backlog at (1.7M a day): a backlog spans `sessions / RATE` seconds of the
product's clock, the last one ended an hour ago."""


def write_spool(spool: Path, first: int, count: int, ended: float, tokens: int = 96) -> None:
    """`count` sessions s<first>... of `tokens` tokens, each followed by its signal 30 s after it ended, in files of
    about PER_FILE 96-token sessions' size, named so they sort after every earlier file; session i ended
    `(first + count - 1 - i) / RATE` seconds before `ended`."""
    context, sampled_ids, messages = token_streams(tokens)
    sampled = {"token_ids": sampled_ids, "sampled": True, "logprobs": [-0.5] * len(sampled_ids)}
    template = json.dumps(
        {
            "schema": "composer-session",
            "version": 1,
            "kind": "session",
            "session_id": "@SID@",
            "policy_version": 0,
            "sampling": {"temperature": 1.0},
            "started_at": -2.0,
            "ended_at": -1.0,
            "user": "@USER@",
            "group": "",
            "branches": [{"segments": [{"token_ids": context, "sampled": False}, sampled]}],
            **({"messages": messages} if messages else {}),
        }
    )
    signal = json.dumps(
        {
            "schema": "composer-session",
            "version": 1,
            "kind": "signal",
            "session_id": "@SID@",
            "at": -3.0,
            "signal": {"type": "edit", "kept": True, "after_s": 30},
        }
    )
    spool.mkdir(parents=True, exist_ok=True)
    per_file = max(100, PER_FILE * 96 // tokens)  # files of about the same size whatever the shape
    for start in range(first, first + count, per_file):
        stop = min(start + per_file, first + count)
        with (spool / f"{start:012d}.jsonl").open("w") as f:
            for i in range(start, stop):
                sid, end = f"s{i:09d}", ended - (first + count - 1 - i) / RATE
                line = template.replace("@SID@", sid).replace("@USER@", f"u{i % 997}")
                line = line.replace('"started_at": -2.0', f'"started_at": {end - 60}')
                f.write(line.replace('"ended_at": -1.0', f'"ended_at": {end}') + "\n")
                f.write(signal.replace("@SID@", sid).replace('"at": -3.0', f'"at": {end + 30}') + "\n")


def checkpoint(checkpoints: Path, step: int, drawn: int) -> None:
    """A PRIME-RL orchestrator checkpoint that drew `drawn` tasks (`orchestrator/ckpt.py`), the older one removed."""
    import torch

    path = checkpoints / f"step_{step}" / "orchestrator"
    path.mkdir(parents=True)
    state = {"rng": None, "envs": {"realtime": {"sampler": {"cursor": drawn}, "gates": {}}}}
    torch.save({"progress": {"step": step}, "train_source": state}, path / "progress.pt")
    for old in checkpoints.glob("step_*"):
        if old.name != f"step_{step}":
            shutil.rmtree(old)


class Probe:
    """The source drawn on a real event loop, as PRIME-RL's dispatcher draws it, with a ticker measuring lag."""

    def __init__(self, taskset, checkpoints: Path, ckpt_every: int):
        self.taskset = taskset
        self.checkpoints = checkpoints
        self.ckpt_every = ckpt_every
        self.stream = iter(taskset)
        self.drawn = 0
        self.sessions = 0
        self.worst_lag = 0.0
        self.stalls = 0
        self.state_peak = 0
        """The largest `journal/state.json` seen between passes (the cursor with what it holds mid-backlog)."""
        """Wake-ups of the ticker more than 50 ms late."""
        self.worst_pass = 0.0
        """The longest dispatcher pass (up to INFLIGHT draws and the checkpoint writes between them, on the loop)."""
        self.worst_draw = 0.0
        """The longest single draw (`next(stream)`): the source's own hold on the loop."""

    async def _ticker(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            before = loop.time()
            await asyncio.sleep(TICK_S)
            lag = loop.time() - before - TICK_S
            if lag > 0.05 and os.environ.get("PROBE_TRACE"):
                import traceback

                worker = self.stream.worker
                frame = sys._current_frames().get(worker.ident) if worker is not None else None
                where = "".join(traceback.format_stack(frame)[-3:]) if frame is not None else "-"
                print(f"lag {lag * 1e3:.1f} ms at drawn {self.drawn}; read thread at:\n{where}", file=sys.stderr)
            self.worst_lag = max(self.worst_lag, lag)
            self.stalls += lag > 0.05

    async def _dispatcher(self, stop: asyncio.Event, want: int, idle_s: float) -> None:
        from composer_prime.realtime.ingest.readiness import TaskNotReady

        idle_until = None
        while True:
            pass_started = time.perf_counter()
            try:
                for _ in range(INFLIGHT):
                    drawing = time.perf_counter()
                    try:
                        task = next(self.stream)
                    finally:
                        self.worst_draw = max(self.worst_draw, time.perf_counter() - drawing)
                    self.drawn += 1
                    self.sessions += len(task.data.sessions)
                    if self.drawn % self.ckpt_every == 0:
                        checkpoint(self.checkpoints, self.drawn, self.drawn)
            except TaskNotReady:
                pass
            self.worst_pass = max(self.worst_pass, time.perf_counter() - pass_started)
            try:
                self.state_peak = max(self.state_peak, (self.taskset.config.journal / "state.json").stat().st_size)
            except OSError:
                pass
            if self.sessions >= want:
                if idle_until is None:
                    idle_until = time.monotonic() + idle_s
                if time.monotonic() >= idle_until:
                    break
            await asyncio.sleep(DRAW_EVERY_S)
        stop.set()

    def run(self, want: int, idle_s: float = 0.0) -> float:
        """Draw until `want` sessions were handed out (then stay `idle_s` longer); seconds until the last one."""

        async def main() -> float:
            stop = asyncio.Event()
            started = time.monotonic()
            ticker = asyncio.create_task(self._ticker(stop))
            await self._dispatcher(stop, want, idle_s)
            await ticker
            return time.monotonic() - started - idle_s

        return asyncio.run(main())


def disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def scenario(kind: str, root: Path, backlog: int, history: int, ckpt_every: int, tokens: int) -> dict:
    import torch  # noqa: F401  (PRIME-RL's orchestrator has it loaded; the checkpoints here and the journal read it)
    import transformers  # noqa: F401  (and transformers: it loads its tokenizer)
    import verifiers  # noqa: F401

    from composer_prime.realtime.ingest.source import RealtimeSessionsTaskset
    from composer_prime.realtime.ingest.source_config import RealtimeSessionsConfig
    from tests.support.tokenizer import tiny_tokenizer

    spool, journal, checkpoints = root / "spool", root / "journal", root / "rl" / "checkpoints"
    config = RealtimeSessionsConfig.model_validate(
        {
            "id": "realtime-sessions",
            "journal": str(journal),
            "bundle_size": 8,
            "poll_s": 0.5,
            "checkpoints": str(checkpoints),
            "checkpoint_env": "realtime",
            "pii": {"tokenizer": tiny_tokenizer()},
            "spool": {"dir": str(spool), "signal_window_s": 600, "retire_after_s": 0},
        }
    )
    ended = time.time() - 3600
    out: dict = {"scenario": kind, "tokens": tokens, "backlog": backlog}
    if kind == "history":
        probe = Probe(RealtimeSessionsTaskset(config), checkpoints, ckpt_every)
        seconds = 0.0
        for first in range(0, history, PER_FILE):  # history arrives a file at a time, each drained before the next
            write_spool(spool, first, min(PER_FILE, history - first), ended)
            seconds += probe.run(min(first + PER_FILE, history))
        probe.stream.close()
        out |= {
            "history_rate": history / seconds,
            "history_lag_ms": probe.worst_lag * 1e3,
            "history_draw_ms": probe.worst_draw * 1e3,
            "history_s": seconds,
            "history_state_bytes": disk(journal),
        }
        first = history
    else:
        first = 0
    write_spool(spool, first, backlog, ended, tokens)
    probe = Probe(RealtimeSessionsTaskset(config), checkpoints, ckpt_every)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    seconds = probe.run(backlog, idle_s=3 * config.poll_s)  # then idle polls over the history
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    probe.stream.close()
    out |= {
        "rate": backlog / seconds,
        "cpu_rate": backlog / cpu_s,
        "lag_ms": probe.worst_lag * 1e3,
        "stalls": probe.stalls,
        "seconds": seconds,
        "pass_ms": probe.worst_pass * 1e3,
        "draw_ms": probe.worst_draw * 1e3,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "state_bytes": disk(journal),
        "state_json_bytes": (journal / "state.json").stat().st_size,
        "state_json_peak": probe.state_peak,
        "ids_bytes": disk(journal / "ids"),
        "spool_files_left": len(list(spool.glob("*.jsonl"))),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, nargs="+", default=[10_000], help="backlog sizes to drain")
    parser.add_argument("--tokens", type=int, nargs="+", default=[96], choices=sorted(SHAPES), help="session shapes")
    parser.add_argument("--history", type=int, default=1_000_000, help="0: no history scenario")
    parser.add_argument("--ckpt-every", type=int, default=64, help="bundles drawn between PRIME-RL checkpoints")
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temp dir, removed)")
    parser.add_argument("--scenario", choices=["backlog", "history"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:
        result = scenario(args.scenario, args.out, args.backlog[0], args.history, args.ckpt_every, args.tokens[0])
        print(json.dumps(result))
        return
    base = args.out or Path(tempfile.mkdtemp(prefix="realtime-ingest-"))
    runs = [("backlog", n, t) for t in args.tokens for n in args.backlog]
    runs += [("history", args.backlog[0], 96)] if args.history else []
    print(
        "| case | tokens | sessions | ingest sessions/s (wall) | per CPU second | worst loop lag | stalls > 50 ms | "
        "longest draw | peak RSS | journal on disk (state.json, id memory) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, backlog, tokens in runs:
        root = base / f"{kind}-{tokens}-{backlog}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        cmd = [sys.executable, __file__, "--scenario", kind, "--out", str(root), "--backlog", str(backlog)]
        cmd += ["--history", str(args.history), "--ckpt-every", str(args.ckpt_every), "--tokens", str(tokens)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        shutil.rmtree(root, ignore_errors=True)
        if result.returncode != 0:
            sys.exit(f"{kind} failed:\n{result.stderr[-3000:]}")
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps(r), file=sys.stderr)
        journal = (
            f"{r['state_bytes'] / 1e6:.2f} MB ({r['state_json_bytes'] / 1e3:.1f} kB, at most "
            f"{r.get('state_json_peak', 0) / 1e6:.2f} MB while read; {r['ids_bytes'] / 1e6:.2f} MB)"
        )
        if kind == "history":
            print(
                f"| {args.history:,} sessions of history (the ingest) | 96 | {args.history:,} | "
                f"{r['history_rate']:,.0f} | - | {r['history_lag_ms']:.1f} ms | - | {r['history_draw_ms']:.1f} ms | - | "
                f"{r['history_state_bytes'] / 1e6:.2f} MB |"
            )
            name = f"backlog after {args.history:,} of history (restart, idle polls)"
        else:
            name = "backlog, fresh journal"
        print(
            f"| {name} | {tokens:,} | {backlog:,} | {r['rate']:,.0f} | {r['cpu_rate']:,.0f} | {r['lag_ms']:.1f} ms | "
            f"{r['stalls']} | "
            f"{r['draw_ms']:.1f} ms | {r['rss_mb']:.0f} MB | {journal} |",
            flush=True,
        )
    if args.out is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
