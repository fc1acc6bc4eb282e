"""Does the recipe learn faster? Paired-seed RL runs of a small policy through the project's own algorithm and loss.

A small policy (a character-level GRU, or the Qwen3 architecture at toy size) solves step-by-step arithmetic through
tool-like turns (bench/learning_task.py: the task, its exact verifier, a rule-based teacher that names wrong steps
and is itself wrong at a set rate). Every RL step of
every arm is the composer pipeline as PRIME-RL runs it, on `vf.Trace` graphs:

1. rollouts: P prompts x G samples from the live policy; the verifier's reward and the teacher's block
   (`trace.info["teacher"]`, the teacher hook's schema) on each trace;
2. `composer_prime.algorithm.hints.annotate_hints`: target selection, hint text and rendering, prefill requests,
   scored by the live policy (the `score` callable stands in for `InferencePool.score`), references written back;
3. `composer_prime.algorithm.credit.group_advantages`: outcome advantage (Dr. GRPO) plus replay credit, per token;
4. samples per branch (`composer_prime.realtime.cycle.trainer.trace_samples`, PRIME-RL's `trace_to_samples` shape), one
   loss call per sample, summed and divided by the rl-token count, one AdamW step.

The loss is `composer_prime.loss.composer_loss`; the GRPO arm uses `composer_prime.loss.prime_rl_default_loss`
(PRIME-RL's own `default_loss_fn`) when PRIME-RL's sources are importable (`--prime-rl-src` or PRIME_RL_SRC), and
otherwise composer_loss with no reference stream, which tests/unit/test_loss.py and tests/contract/test_loss_contract.py
show equal to it in value and gradient. The table says which one ran.

Arms (`--arms`, default: the issue-44 set `learning_run.DEFAULT_ARMS`): grpo; replay (RLVR + replay); hints (RLVR +
targeted hints); full (both, the defaults of ComposerLossConfig); `-gated`: SDAR's sigmoid gate on the hint term;
whole (the failed trace's corrections as a system prefix, every step of it scored, per-token weight); opsd
(OPSD-style whole-trace self-distillation: the right solution as a system prefix of every trace, solved or not);
on request the sweeps of the earlier tables (hint_coef 0.01/0.05/0.15/0.5, 1 or 4 targets per trace, sibling hints).

Sizes (`--sizes`, bench/learning_policy.py): the GRU (`gru`, the floor) and the Qwen3 architecture at toy size
(`qwen-xs` 7.5k parameters to `qwen-xxl` 25M), each pretrained by the bench on the task language (the GRU by its
hint drill) and cached. All arms of a seed start from the same warm start and see the same prompts. Rollouts sample
at the preset's temperature (0.3: at 1 the GRU's warm start passes 2-3 % of its samples); the RL learning rate warms
up linearly over the first `warmup` steps, as PRIME-RL's scheduler can (docs/evidence.md says which probes chose it).

    python bench/learning.py                      # CPU preset: the size table on 2 cores (resumable, see --cache)
    python bench/learning.py --preset quick       # two seeds, 40 steps, the GRU and qwen-m
    python bench/learning.py --device cuda        # GPU preset: larger sizes, 300 steps x 64 prompts x 8 samples
    python bench/learning.py --preset tiny        # seconds; what tests/e2e/test_learning_bench.py runs

Every base, warm start and (arm, seed) run is cached under `--cache` (default `<out>/cache/<preset>`), keyed by the
settings, the arm, the seed and the code version, and read back on a rerun: an interrupted table resumes where it
stopped, and a figure once measured is the figure reported.

Writes `<out>/table.md` (the hint channel against size, then each size's table) and per size
`<out>/<size>/results.json`, `table.md`, `curves.png`. Figures: steps to +10 and +20 points of held-out greedy
accuracy over the warm start, final accuracy, area under the accuracy-gain curve (mean gain over the evaluations,
in points), each as mean +- std over seeds and paired against GRPO and replay; each arm's extra compute (prefill-
scored tokens against the rollouts' tokens, prefilled sequences and batched prefill passes per step).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import learning_policy as lp  # noqa: E402
import learning_report  # noqa: E402
from learning_run import ARMS, DEFAULT_ARMS, base_job, loss_setup, rl_job, warm_start_job  # noqa: E402

# steps x prompts x group: 160 x 12 x 8 = 15k episodes per run. lr 2e-3 collapsed GRPO; at 80 steps, without
# warmup and after a 500-step hint drill GRPO gained 2.5 points (docs/evidence.md, probes).
CPU = dict(
    sizes="gru,qwen-s,qwen-m,qwen-l",
    steps=160,
    prompts=12,
    group=8,
    seeds=5,
    eval_every=10,
    eval_size=256,
    lr=3e-4,
    warmup=10,
    temperature=0.3,
    sft_steps=3000,
    hint_drill=100,
    pretrain=2000,
    warm_target=0.30,
    task_steps=4,
)
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": CPU,
    # the table's shape in less time: two seeds, 40 steps, the GRU and the middle transformer
    "quick": {**CPU, "sizes": "gru,qwen-m", "steps": 40, "seeds": 2, "eval_size": 128},
    "gpu": {
        **CPU,
        "sizes": "gru-gpu,qwen-l,qwen-xl,qwen-xxl",
        "steps": 300,
        "prompts": 64,
        "eval_size": 1024,
        "lr": 5e-4,
        "sft_steps": 6000,
        "warm_target": 0.35,
        "task_steps": 5,
    },
    "tiny": dict(
        sizes="gru,qwen-xs",
        steps=3,
        prompts=3,
        group=4,
        seeds=2,
        eval_every=1,
        eval_size=16,
        lr=2e-3,
        warmup=0,
        temperature=1.0,
        sft_steps=20,
        hint_drill=5,
        pretrain=5,
        warm_target=1.0,
        task_steps=3,
    ),
}


@dataclass(frozen=True)
class Settings:
    """One size's settings: the preset's values, `size` one of its `sizes`."""

    device: str
    size: str
    steps: int
    prompts: int
    group: int
    seeds: int
    eval_every: int
    eval_size: int
    lr: float
    warmup: int
    temperature: float
    sft_steps: int
    hint_drill: int
    pretrain: int
    """At most this many pretraining steps of a transformer's base (`learning_policy.pretrain`)."""
    warm_target: float
    task_steps: int
    teacher_error: float
    prime_rl_src: str | None


def run_all(
    settings: Settings, names: list[str], workers: int, cache: lp.Cache
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The base policy, then every seed's warm start from it, then each seed's RL runs (one per arm) as soon as its
    warm start is done, on `workers` processes; returns (base, warm starts, runs), in seed order."""
    from tqdm import tqdm

    seeds = list(range(settings.seeds))
    bar = tqdm(
        total=1 + len(seeds) * (1 + len(names)), desc=f"{settings.size}: base + warm starts + rl runs", unit="run"
    )
    warm: dict[int, dict[str, Any]] = {}
    runs: dict[tuple[int, str], dict[str, Any]] = {}
    base = base_job(settings, cache) if workers <= 1 else None
    if workers <= 1:
        bar.update()
        for seed in seeds:
            warm[seed] = warm_start_job(seed, settings, base["state"], cache)
            bar.update()
            for name in names:
                runs[seed, name] = rl_job(seed, ARMS[name], warm[seed]["state"], settings, cache)
                bar.update()
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            pending = {pool.submit(base_job, settings, cache)}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.exception() is not None:  # stop at the first failure, not after every queued run
                        pool.shutdown(wait=False, cancel_futures=True)
                    result = future.result()
                    bar.update()
                    if "arm" in result:
                        runs[result["seed"], result["arm"]] = result
                    elif "seed" in result:
                        warm[result["seed"]] = result
                        pending |= {
                            pool.submit(rl_job, result["seed"], ARMS[n], result["state"], settings, cache)
                            for n in names
                        }
                    else:
                        base = result
                        pending |= {pool.submit(warm_start_job, seed, settings, base["state"], cache) for seed in seeds}
    bar.close()
    for w in (base, *warm.values()):
        w.pop("state")
    return base, [warm[s] for s in seeds], [runs[s, n] for s in seeds for n in names]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda selects the gpu preset)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="default: cpu, or gpu with --device cuda")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated, from: {', '.join(ARMS)}")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="parallel runs (processes)")
    parser.add_argument(
        "--teacher-error", type=float, default=0.15, help="chance the teacher's verdict on a step is wrong"
    )
    parser.add_argument(
        "--prime-rl-src",
        default=os.environ.get("PRIME_RL_SRC"),
        help="PRIME-RL checkout for the GRPO arm's default_loss_fn (default: $PRIME_RL_SRC)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-out/learning"))
    parser.add_argument(
        "--cache", type=Path, help="per-seed results, reused when their key matches (default: <out>/cache)"
    )
    parser.add_argument("--no-cache", action="store_true", help="compute everything, write no cache")
    for key, value in PRESETS["cpu"].items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"(cpu preset: {value})")
    args = parser.parse_args(argv)

    preset = args.preset or ("gpu" if args.device.startswith("cuda") else "cpu")
    values = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in PRESETS[preset].items()}
    sizes = [n.strip() for n in values.pop("sizes").split(",") if n.strip()]
    if not sizes or any(n not in lp.SIZES for n in sizes):
        parser.error(f"--sizes {','.join(sizes)!r}: choose one or more of {', '.join(lp.SIZES)}")
    common = dict(device=args.device, teacher_error=args.teacher_error, prime_rl_src=args.prime_rl_src, **values)
    settings = Settings(size=sizes[0], **common)
    names = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        parser.error(f"--arms {args.arms!r}: unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    if "grpo" not in names:
        names.insert(0, "grpo")  # every figure is paired against GRPO
    if settings.prime_rl_src and not (Path(settings.prime_rl_src) / "src" / "prime_rl").is_dir():
        parser.error(f"--prime-rl-src {settings.prime_rl_src}: no src/prime_rl there; point it at a PRIME-RL checkout")
    if settings.prime_rl_src and "grpo" in names:
        try:  # before any work: a missing dependency would otherwise surface with the first GRPO run's result
            loss_setup(ARMS["grpo"], settings)
        except ImportError as err:
            parser.error(
                f"--prime-rl-src {settings.prime_rl_src}: PRIME-RL's loss does not import ({err}); install "
                "its dependencies with pip install -e '.[contract]'"
            )
    workers = 1 if args.device.startswith("cuda") else max(1, args.workers)
    cache = lp.Cache(None if args.no_cache else (args.cache or args.out / "cache") / preset, lp.code_version())

    tables = []
    for size in sizes:
        settings = Settings(size=size, **common)
        start = time.perf_counter()
        base, warm, runs = run_all(settings, names, workers, cache)
        results = {
            "preset": preset,
            "settings": asdict(settings),
            "parameters": lp.parameters(lp.SIZES[size]),
            "arms": [asdict(ARMS[n]) for n in names],
            "base": base,
            "warm_start": warm,
            "runs": runs,
            "wall_seconds": time.perf_counter() - start,
            "workers": workers,
            "code_version": cache.version,
        }
        tables.append(learning_report.write(results, args.out / size))
    table = learning_report.write_sizes(args.out, sizes)
    print(table)
    print(f"wrote {args.out}/table.md and, per size, results.json, table.md, curves.png; cache {cache.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
