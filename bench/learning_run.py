"""One seed of bench/learning.py: its base policy, its warm start, and the RL run of each arm, each cached on disk.

An RL step is the composer pipeline as PRIME-RL runs it (bench/learning.py's docstring): rollouts, the teacher's
block, `annotate_hints` (scored by the live policy through `BatchScorer`), `group_advantages`, samples per branch,
one loss call per sample and one AdamW step. Every job first looks for its result in the cache
(bench/learning_policy.py `Cache`) and writes it there when it computes it.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import learning_policy as lp
import learning_task as task

if TYPE_CHECKING:
    from learning import Settings


@dataclass(frozen=True)
class Arm:
    name: str
    hints: bool = False
    replay: bool = False
    whole: bool = False
    """The teacher's corrections of a failed trace as a system prefix, every step of the trace a target."""
    opsd: bool = False
    """OPSD-style whole-trace self-distillation: the right solution (privileged, not the teacher's noisy verdicts) as
    a system prefix on every trace, failed or solved, every step a target, per-token weight."""
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
        Arm("opsd", hints=True, whole=True, opsd=True),
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

DEFAULT_ARMS = ["grpo", "replay", "hints", "hints-gated", "full", "full-gated", "whole", "opsd"]
"""The hint channel against model size (issue 44); the sweeps of the earlier tables run by `--arms`."""


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
        self.passes = 0
        """Batched prefill forward passes (`requests` sequences in all)."""

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
        self.passes += 1
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
        if arm.opsd:  # privileged context: the right solution, on every step of every trace
            text = "; ".join(task.solution(e.problem))
            for step in block["steps"]:
                step["hint"] = text
        elif arm.whole:  # the failed episode's corrections, on every step
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
        "prefill_tokens": float(sum(s.prefill_tokens for s in stats)),
        "prefill_new_tokens": float(sum(s.new_tokens for s in stats)),
        "prefill_requests": float(scorer.requests),
        "prefill_passes": float(scorer.passes),
        "rollout_tokens": float(sum(len(s.token_ids) for s in samples)),
    }


TOTALS = (
    "hint_tokens",
    "hint_targets",
    "sibling_targets",
    "rl_tokens",
    "prefill_tokens",
    "prefill_new_tokens",
    "prefill_requests",
    "prefill_passes",
    "rollout_tokens",
)
"""Per-run sums over the RL steps: tokens with a hint reference, targets, the tokens trained, and the extra compute of
the hint channel (prefill-scored tokens, of which not in a prefix cache, scored sequences, batched forward passes)
against the rollouts' tokens."""


def problems_for(seed: int, step: int, count: int, task_steps: int) -> list[task.Problem]:
    rng = random.Random(f"{seed}/{step}")
    return [task.sample_problem(rng, task_steps) for _ in range(count)]


def _state(policy: Any) -> dict[str, Any]:
    return {k: v.cpu() for k, v in policy.state_dict().items()}


def base_job(settings: Settings, cache: lp.Cache) -> dict[str, Any]:
    """The base policy every seed's warm start starts from (`learning_policy.pretrain`), cached."""
    import torch

    path = cache.path("base", settings, ext="pt")
    if (found := cache.load(path)) is not None:
        return found
    torch.set_num_threads(1)
    torch.manual_seed(0)
    size = lp.SIZES[settings.size]
    policy = lp.make_policy(size, settings.device)
    start = time.perf_counter()
    steps = lp.pretrain(
        policy, size, settings.hint_drill if size.kind == "gru" else settings.pretrain, settings.task_steps
    )
    out = {"state": _state(policy), "steps": steps, "seconds": time.perf_counter() - start}
    cache.store(path, out)
    return out


def warm_start_job(seed: int, settings: Settings, base: dict[str, Any], cache: lp.Cache) -> dict[str, Any]:
    """Seed `seed`'s warm start from the base, with its held-out accuracy and its hint reading, cached."""
    import torch

    path = cache.path("warm", settings, seed, ext="pt")
    if (found := cache.load(path)) is not None:
        return found
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    size = lp.SIZES[settings.size]
    policy = lp.make_policy(size, settings.device)
    policy.load_state_dict(base)
    start = time.perf_counter()
    acc, steps = task.warm_start(
        policy,
        settings.sft_steps,
        seed,
        settings.warm_target,
        problems_for(seed, -1, settings.eval_size, settings.task_steps),
        **lp.SFT[size.kind],
    )
    seconds = time.perf_counter() - start
    reading = task.hint_reading(
        policy, problems_for(seed, -2, settings.eval_size, settings.task_steps), random.Random(f"reading/{seed}")
    )
    out = {"seed": seed, "state": _state(policy), "accuracy": acc, "steps": steps, "seconds": seconds}
    out["hint_reading"] = reading
    cache.store(path, out)
    return out


def rl_job(seed: int, arm: Arm, state: dict[str, Any], settings: Settings, cache: lp.Cache) -> dict[str, Any]:
    """Seed `seed`'s RL run of `arm` from its warm start, cached."""
    import torch

    path = cache.path("rl", settings, seed, arm)
    if (found := cache.load(path)) is not None:
        return found
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    policy = lp.make_policy(lp.SIZES[settings.size], settings.device)
    policy.load_state_dict(state)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=settings.lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / max(1, settings.warmup)))
    algo, loss = algo_config(arm), loss_setup(arm, settings)
    eval_set = problems_for(seed, -1, settings.eval_size, settings.task_steps)
    teacher_rng = random.Random(f"teacher/{seed}")
    generator = torch.Generator().manual_seed(seed)
    curve = [(0, task.accuracy(policy, eval_set))]
    totals = dict.fromkeys(TOTALS, 0.0)
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
    out = {
        "seed": seed,
        "size": settings.size,
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
    cache.store(path, out)
    return out
