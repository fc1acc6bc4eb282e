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

Sessions are small (64 context and 32 sampled tokens with logprobs, ~1.1 kB a line with its signal), so the rates
measure the source's own work per session (parse, join, PII scan of the decoded tokens, journal), not token volume.
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


def write_spool(spool: Path, first: int, count: int, ended: float) -> None:
    """`count` sessions s<first>..., each followed by its signal, in files of PER_FILE sessions, named so they sort
    after every earlier file."""
    context = list(range(1, 65))
    sampled = {"token_ids": list(range(100, 132)), "sampled": True, "logprobs": [-0.5] * 32}
    template = json.dumps(
        {
            "schema": "composer-session",
            "version": 1,
            "kind": "session",
            "session_id": "@SID@",
            "policy_version": 0,
            "sampling": {"temperature": 1.0},
            "started_at": ended - 60,
            "ended_at": ended,
            "user": "@USER@",
            "group": "",
            "branches": [{"segments": [{"token_ids": context, "sampled": False}, sampled]}],
        }
    )
    signal = json.dumps(
        {
            "schema": "composer-session",
            "version": 1,
            "kind": "signal",
            "session_id": "@SID@",
            "at": ended + 30,
            "signal": {"type": "edit", "kept": True, "after_s": 30},
        }
    )
    spool.mkdir(parents=True, exist_ok=True)
    for start in range(first, first + count, PER_FILE):
        stop = min(start + PER_FILE, first + count)
        lines = []
        for i in range(start, stop):
            sid = f"s{i:09d}"
            lines.append(template.replace("@SID@", sid).replace("@USER@", f"u{i % 997}"))
            lines.append(signal.replace("@SID@", sid))
        (spool / f"{start:012d}.jsonl").write_text("\n".join(lines) + "\n")


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


def scenario(kind: str, root: Path, backlog: int, history: int, ckpt_every: int) -> dict:
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
    out: dict = {"scenario": kind}
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
    write_spool(spool, first, backlog, ended)
    probe = Probe(RealtimeSessionsTaskset(config), checkpoints, ckpt_every)
    seconds = probe.run(backlog, idle_s=3 * config.poll_s)  # then idle polls over the history
    probe.stream.close()
    out |= {
        "rate": backlog / seconds,
        "lag_ms": probe.worst_lag * 1e3,
        "seconds": seconds,
        "pass_ms": probe.worst_pass * 1e3,
        "draw_ms": probe.worst_draw * 1e3,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "state_bytes": disk(journal),
        "state_json_bytes": (journal / "state.json").stat().st_size,
        "ids_bytes": disk(journal / "ids"),
        "spool_files_left": len(list(spool.glob("*.jsonl"))),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--ckpt-every", type=int, default=64, help="bundles drawn between PRIME-RL checkpoints")
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temp dir, removed)")
    parser.add_argument("--scenario", choices=["backlog", "history"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:
        root = args.out
        print(json.dumps(scenario(args.scenario, root, args.backlog, args.history, args.ckpt_every)))
        return
    base = args.out or Path(tempfile.mkdtemp(prefix="realtime-ingest-"))
    rows = []
    for kind in ("backlog", "history"):
        root = base / kind
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        cmd = [
            sys.executable,
            __file__,
            "--scenario",
            kind,
            "--out",
            str(root),
            "--backlog",
            str(args.backlog),
            "--history",
            str(args.history),
            "--ckpt-every",
            str(args.ckpt_every),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            sys.exit(f"{kind} failed:\n{result.stderr[-3000:]}")
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    if args.out is None:
        shutil.rmtree(base, ignore_errors=True)
    backlog, history = rows
    print(
        "| case | sessions | worst loop lag | longest draw | ingest sessions/s | peak RSS | state on disk (state.json, id "
        "memory) |"
    )
    print("|---|---|---|---|---|---|---|")

    def row(name: str, n: int, r: dict, lag: float, rate: float) -> str:
        return (
            f"| {name} | {n:,} | {lag:.1f} ms | {r['draw_ms']:.1f} ms | {rate:,.0f} | {r['rss_mb']:.0f} MB | "
            f"{r['state_bytes'] / 1e6:.2f} MB ({r['state_json_bytes'] / 1e3:.1f} kB, "
            f"{r['ids_bytes'] / 1e6:.2f} MB) |"
        )

    print(row("10k backlog, fresh journal", args.backlog, backlog, backlog["lag_ms"], backlog["rate"]))
    print(
        f"| {args.history:,} sessions of history (the ingest) | {args.history:,} | {history['history_lag_ms']:.1f} ms "
        f"| {history['history_draw_ms']:.1f} ms | {history['history_rate']:,.0f} | - | {history['history_state_bytes'] / 1e6:.2f} MB |"
    )
    print(
        row(
            f"10k backlog after {args.history:,} of history (restart, idle polls)",
            args.backlog,
            history,
            history["lag_ms"],
            history["rate"],
        )
    )


if __name__ == "__main__":
    main()
