"""Does the recipe learn faster? Paired-seed RL runs of a small policy through the project's own algorithm and loss.

A character-level GRU solves step-by-step arithmetic through tool-like turns (bench/learning_task.py: the task, its
exact verifier, a rule-based teacher that names wrong steps and is itself wrong at a set rate). Every RL step of
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

Arms (`--arms`, default all but `full-coef0.5`): grpo; hints (RLVR + targeted hints); replay (RLVR + replay); full
(both, hints on and the defaults of ComposerLossConfig); whole (opsd-style: the hint as a system prefix, every step of
a failed trace scored, per-token weight); full with hint_coef 0.01/0.05/0.15 (0.01: the ungated
reference for the gated arms, whose gate is 1/2 at a gap of 0; 0.5 on request: it lost to `full` on every
seed of the earlier table, docs/evidence.md); full with 1 or 4 targets per trace; hints and full with SDAR's sigmoid
gate on the hint term (`-gated`) and with sibling hints, a solved trace of the group lending its step to the failed
ones (`-sibling`). All arms of a seed start from the
same supervised warm start and see the same prompts; every seed's warm start starts from one base policy drilled
briefly to read hints (bench/learning_task.py). Rollouts sample at the preset's temperature (0.3: at 1 the warm start
passes 2-3 % of its samples and GRPO gets almost no signal); the RL learning rate warms up linearly over the first
`warmup` steps, as PRIME-RL's scheduler can (docs/evidence.md says which probes chose the preset).

    python bench/learning.py                      # CPU preset: about 22 min on 2 shared cores
    python bench/learning.py --device cuda        # GPU preset: larger policy, 300 steps x 64 prompts x 8 samples
    python bench/learning.py --preset tiny        # seconds; what tests/e2e/test_learning_bench.py runs

Writes `<out>/results.json`, `<out>/table.md` and `<out>/curves.png`. Figures: steps to +10 and +20 points of
held-out greedy accuracy over the warm start, final accuracy, area under the accuracy-gain curve (mean gain over
the evaluations, in points), each as mean +- std over seeds and as a paired difference to GRPO.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[0]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import learning_report  # noqa: E402
import learning_task as task  # noqa: E402


@dataclass(frozen=True)
class Arm:
    name: str
    hints: bool = False
    replay: bool = False
    whole: bool = False
    """opsd-style: hint as a system prefix over the whole completion, every step of a failed trace a target."""
    prime_rl_loss: bool = False
    """PRIME-RL's default loss (GRPO arm); composer_loss otherwise."""
    hint_coef: float | None = None
    """None: ComposerLossConfig's default."""
    targets: int | None = None
    """None: HintConfig's default max_targets_per_trace."""
    gate: bool = False
    """SDAR's sigmoid gate on the hint term (`hint_gate = "sigmoid"`, alpha 1)."""
    siblings: bool = False
    """Sibling hints (`hints.siblings`, one target per failed trace beside its own): a solved trace of the group lends
    its line for the step to the failed ones."""


ARMS = {
    arm.name: arm
    for arm in (
        Arm("grpo", prime_rl_loss=True),
        Arm("hints", hints=True),
        Arm("replay", replay=True),
        Arm("full", hints=True, replay=True),
        Arm("whole", hints=True, whole=True),
        Arm("full-coef0.05", hints=True, replay=True, hint_coef=0.05),
        Arm("full-coef0.15", hints=True, replay=True, hint_coef=0.15),
        Arm("full-coef0.01", hints=True, replay=True, hint_coef=0.01),
        Arm("full-coef0.5", hints=True, replay=True, hint_coef=0.5),
        Arm("full-targets1", hints=True, replay=True, targets=1),
        Arm("full-targets4", hints=True, replay=True, targets=4),
        Arm("hints-gated", hints=True, gate=True),
        Arm("hints-sibling", hints=True, siblings=True),
        Arm("full-gated", hints=True, replay=True, gate=True),
        Arm("full-sibling", hints=True, replay=True, siblings=True),
    )
}

DEFAULT_ARMS = [name for name in ARMS if name != "full-coef0.5"]
"""Every arm the issues name, with the hint_coef sweep at 0.05 and 0.15 around the 0.02 default (0.5 by `--arms`)."""

PRESETS: dict[str, dict[str, Any]] = {
    # steps x prompts x group: 160 x 12 x 8 = 15k episodes per run; 9 arms x 5 seeds. lr 2e-3 collapsed GRPO; at
    # 80 steps, without warmup and after a 500-step hint drill GRPO gained 2.5 points (docs/evidence.md, probes).
    "cpu": dict(
        hidden=96,
        layers=1,
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
        warm_target=0.30,
        task_steps=4,
    ),
    "gpu": dict(
        hidden=512,
        layers=2,
        steps=300,
        prompts=64,
        group=8,
        seeds=5,
        eval_every=10,
        eval_size=1024,
        lr=5e-4,
        warmup=10,
        temperature=0.3,
        sft_steps=6000,
        hint_drill=100,
        warm_target=0.35,
        task_steps=5,
    ),
    "tiny": dict(
        hidden=24,
        layers=1,
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
        warm_target=1.0,
        task_steps=3,
    ),
}


@dataclass(frozen=True)
class Settings:
    device: str
    hidden: int
    layers: int
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
    warm_target: float
    task_steps: int
    teacher_error: float
    prime_rl_src: str | None


def algo_config(arm: Arm):
    from composer_prime.algorithm.config import ComposerAlgoConfig, HintConfig, ReplayConfig

    # a sibling's hint is its own line for the step, in the form the policy was drilled to read (a teacher's hint)
    hints = HintConfig(enabled=arm.hints, siblings=arm.siblings, templates={"sibling": task.HINT_TEMPLATE})
    if arm.whole:
        hints = HintConfig(enabled=True, max_targets_per_trace=64, placement="system_prefix")
    elif arm.targets is not None:
        hints = HintConfig(enabled=arm.hints, max_targets_per_trace=arm.targets)
    return ComposerAlgoConfig(hints=hints, replay=ReplayConfig(enabled=arm.replay))


def loss_setup(arm: Arm, settings: Settings):
    """(loss function, kwargs, LossInputs class, label) of an arm."""
    from composer_prime.realtime.cycle.trainer import LossInputs

    if arm.prime_rl_loss and settings.prime_rl_src:
        for sub in ("src", "packages/prime-rl-configs/src"):
            sys.path.insert(0, str(Path(settings.prime_rl_src) / sub))
        from prime_rl.trainer.rl.loss import LossInputs as PrimeLossInputs

        from composer_prime.loss import prime_rl_default_loss

        return prime_rl_default_loss, {}, PrimeLossInputs, "prime_rl_default_loss"
    from composer_prime.loss import composer_loss

    kwargs: dict[str, Any] = {}
    if arm.hint_coef is not None:
        kwargs["hint_coef"] = arm.hint_coef
    if arm.whole:
        kwargs["hint_norm"] = "token"
    kwargs["hint_gate"] = "sigmoid" if arm.gate else "none"  # pinned: the gated and ungated arms whatever the default
    label = "composer_loss (no reference stream)" if arm.prime_rl_loss else "composer_loss"
    return composer_loss, kwargs, LossInputs, label


def build_trace(episode: task.Episode, reward: float, info: dict[str, Any]):
    """The episode as verifiers' node graph: a chain of messages, assistant turns sampled."""
    import verifiers.v1 as vf

    nodes = []
    logprobs = iter(episode.logprobs)
    for k, (role, ids) in enumerate(episode.messages):
        sampled = role == "assistant"
        text = task.decode(ids[1:])
        message = (
            {"role": role, "content": text}
            if role != "tool"
            else {"role": "tool", "content": text, "tool_call_id": f"c{k}"}
        )
        nodes.append(
            vf.MessageNode(
                parent=k - 1 if k else None,
                message=message,
                sampled=sampled,
                token_ids=list(ids),
                mask=[False] + [sampled] * (len(ids) - 1),
                logprobs=next(logprobs) if sampled else [],
            )
        )
    trace = vf.Trace(
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        task=vf.TraceTask(type="learning-bench", data={}, key="k", hash="h"),
        nodes=nodes,
        info=info,
    )
    trace.record_reward("verifier", reward)
    return trace


class BatchScorer:
    """`score(token_ids)` for `annotate_hints`: collects the requests in flight and prefills them as one batch."""

    def __init__(self, policy: task.Policy, temperature: float):
        self.policy = policy
        self.temperature = temperature
        self.pending: list[tuple[list[int], asyncio.Future]] = []
        self.requests = 0

    async def __call__(self, token_ids: list[int]) -> list[float]:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((token_ids, future))
        if len(self.pending) == 1:
            asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        seen = -1
        while seen != len(self.pending):  # let every target of the episode ask first
            seen = len(self.pending)
            for _ in range(4):
                await asyncio.sleep(0)
        batch, self.pending = self.pending, []
        self.requests += len(batch)
        import torch

        device = next(self.policy.parameters()).device
        with torch.no_grad():
            ids = task.pad([ids for ids, _ in batch], task.PAD, device)
            logp = self.policy.token_logprobs(ids, self.temperature).tolist()
        for (ids, future), row in zip(batch, logp, strict=True):
            future.set_result(row[: len(ids)])


def rl_step(policy, optimizer, problems, arm, algo, loss, settings, rng, generator) -> dict[str, float]:
    import torch

    from composer_prime.algorithm.credit import group_advantages
    from composer_prime.algorithm.hints import annotate_hints
    from composer_prime.algorithm.siblings import annotate_siblings
    from composer_prime.realtime.cycle.trainer import assign_advantages, trace_samples

    episodes = task.rollout(
        policy, [p for p in problems for _ in range(settings.group)], False, generator, settings.temperature
    )
    traces = []
    for e in episodes:
        reward = task.verify(e.problem, e.lines)
        steps = [k for k, (role, _) in enumerate(e.messages) if role == "assistant"]
        block, hints = task.teacher_block(e.problem, e.lines, steps, settings.teacher_error, rng)
        if arm.whole:  # opsd-style: the failed episode's corrections, on every step
            text = "; ".join(hints) if reward == 0 and hints else None
            for step in block["steps"]:
                step["hint"] = text
        traces.append(build_trace(e, reward, {"teacher": block}))
    scorer = BatchScorer(policy, settings.temperature)
    stats = asyncio.run(annotate_hints(traces, algo, task.render, scorer))
    groups = [traces[g : g + settings.group] for g in range(0, len(traces), settings.group)]
    if algo.hints.siblings:  # at group time, as the algorithm's score_group runs them

        async def siblings() -> list[Any]:
            found = await asyncio.gather(
                *(annotate_siblings(g, [float(t.reward) for t in g], algo.hints, task.render, scorer) for g in groups)
            )
            return [s for group_stats in found for s in group_stats]

        sibling_stats = asyncio.run(siblings())
        stats = [*stats, *sibling_stats]
    for group in groups:
        for trace, values in zip(group, group_advantages(group, algo), strict=True):
            assign_advantages(trace, values)
    samples = [s for t in traces for s in trace_samples(t)]

    fn, kwargs, inputs_cls, _ = loss
    device = next(policy.parameters()).device
    ids = task.pad([s.token_ids for s in samples], task.PAD, device)
    trainer = policy.token_logprobs(ids, settings.temperature)
    total = sum(sum(s.mask) for s in samples)
    optimizer.zero_grad(set_to_none=True)
    value = trainer.new_zeros(())
    for k, s in enumerate(samples):
        n = len(s.token_ids)
        ref = torch.tensor(s.ref_logprobs, device=device) if s.ref_logprobs is not None and algo.hints.enabled else None
        inputs = inputs_cls(
            trainer_logprobs=trainer[k, :n],
            inference_logprobs=torch.tensor(s.logprobs, device=device),
            ref_logprobs=ref,
            advantages=torch.tensor(s.advantages, device=device),
            loss_mask=torch.tensor(s.mask, device=device),
        )
        value = value + fn(inputs, **kwargs).loss
    (value / total).backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    return {
        "reward": sum(float(t.reward) for t in traces) / len(traces),
        "hint_tokens": float(sum(s.tokens for s in stats)),
        "hint_targets": float(sum(s.targets for s in stats)),
        "sibling_targets": float(sum(s.targets for s in sibling_stats)) if algo.hints.siblings else 0.0,
        "rl_tokens": float(total),
    }


def problems_for(seed: int, step: int, count: int, task_steps: int) -> list[task.Problem]:
    rng = random.Random(f"{seed}/{step}")
    return [task.sample_problem(rng, task_steps) for _ in range(count)]


def base_job(settings: Settings) -> dict[str, Any]:
    """The base policy every seed's warm start starts from: `hint_drill` steps of reading hints."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = task.Policy(settings.hidden, settings.layers).to(settings.device)
    start = time.perf_counter()
    task.hint_drill(policy, settings.hint_drill, settings.task_steps)
    state = {k: v.cpu() for k, v in policy.state_dict().items()}
    return {"state": state, "steps": settings.hint_drill, "seconds": time.perf_counter() - start}


def warm_start_job(seed: int, settings: Settings, base: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    policy = task.Policy(settings.hidden, settings.layers).to(settings.device)
    policy.load_state_dict(base)
    start = time.perf_counter()
    acc, steps = task.warm_start(
        policy,
        settings.sft_steps,
        seed,
        settings.warm_target,
        problems_for(seed, -1, settings.eval_size, settings.task_steps),
    )
    seconds = time.perf_counter() - start
    reading = task.hint_reading(
        policy, problems_for(seed, -2, settings.eval_size, settings.task_steps), random.Random(f"reading/{seed}")
    )
    state = {k: v.cpu() for k, v in policy.state_dict().items()}
    return {"seed": seed, "state": state, "accuracy": acc, "steps": steps, "seconds": seconds, "hint_reading": reading}


def rl_job(seed: int, arm: Arm, state: dict[str, Any], settings: Settings) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    policy = task.Policy(settings.hidden, settings.layers).to(settings.device)
    policy.load_state_dict(state)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=settings.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / max(1, settings.warmup)))
    algo, loss = algo_config(arm), loss_setup(arm, settings)
    eval_set = problems_for(seed, -1, settings.eval_size, settings.task_steps)
    teacher_rng = random.Random(f"teacher/{seed}")
    generator = torch.Generator().manual_seed(seed)
    curve = [(0, task.accuracy(policy, eval_set))]
    totals = {"hint_tokens": 0.0, "hint_targets": 0.0, "sibling_targets": 0.0, "rl_tokens": 0.0}
    rewards: list[float] = []
    start = time.perf_counter()
    for step in range(1, settings.steps + 1):
        problems = problems_for(seed, step, settings.prompts, settings.task_steps)
        out = rl_step(policy, optimizer, problems, arm, algo, loss, settings, teacher_rng, generator)
        scheduler.step()
        for key in totals:
            totals[key] += out[key]
        rewards.append(out["reward"])
        if step % settings.eval_every == 0 or step == settings.steps:
            curve.append((step, task.accuracy(policy, eval_set)))
    return {
        "seed": seed,
        "arm": arm.name,
        "loss": loss[3],
        "curve": curve,
        "train_reward": rewards,
        "totals": totals,
        "algo": algo.model_dump(
            include={
                "hints": {"enabled", "max_targets_per_trace", "placement", "siblings", "sibling_targets_per_trace"},
                "replay": {"enabled", "replay_coef"},
            }
        ),
        "loss_kwargs": loss[1],
        "seconds": time.perf_counter() - start,
    }


def run_all(
    settings: Settings, names: list[str], workers: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The base policy, then every seed's warm start from it, then each seed's RL runs (one per arm) as soon as its
    warm start is done, on `workers` processes; returns (base, warm starts, runs), in seed order."""
    from tqdm import tqdm

    seeds = list(range(settings.seeds))
    bar = tqdm(total=1 + len(seeds) * (1 + len(names)), desc="base + warm starts + rl runs", unit="run")
    warm: dict[int, dict[str, Any]] = {}
    runs: dict[tuple[int, str], dict[str, Any]] = {}
    base = base_job(settings) if workers <= 1 else None
    if workers <= 1:
        bar.update()
        for seed in seeds:
            warm[seed] = warm_start_job(seed, settings, base["state"])
            bar.update()
            for name in names:
                runs[seed, name] = rl_job(seed, ARMS[name], warm[seed]["state"], settings)
                bar.update()
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            pending = {pool.submit(base_job, settings)}
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
                            pool.submit(rl_job, result["seed"], ARMS[n], result["state"], settings) for n in names
                        }
                    else:
                        base = result
                        pending |= {pool.submit(warm_start_job, seed, settings, base["state"]) for seed in seeds}
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
    for key, value in PRESETS["cpu"].items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"(cpu preset: {value})")
    args = parser.parse_args(argv)

    preset = args.preset or ("gpu" if args.device.startswith("cuda") else "cpu")
    values = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in PRESETS[preset].items()}
    settings = Settings(device=args.device, teacher_error=args.teacher_error, prime_rl_src=args.prime_rl_src, **values)
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

    start = time.perf_counter()
    base, warm, runs = run_all(settings, names, workers)
    wall = time.perf_counter() - start
    results = {
        "preset": preset,
        "settings": asdict(settings),
        "arms": [asdict(ARMS[n]) for n in names],
        "base": base,
        "warm_start": warm,
        "runs": runs,
        "wall_seconds": wall,
        "workers": workers,
    }
    table = learning_report.write(results, args.out)
    print(table)
    print(f"wrote {args.out}/results.json, table.md, curves.png; {wall:.0f}s wall with {workers} worker(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
