"""The composer algorithm inside PRIME-RL: config parsing by `cli(RLConfig)`, `build_algorithm`, the episode hooks,
`trace_to_samples` and `compute_loss` with `composer_loss`, all PRIME-RL's own code at 559b447.

The orchestrator side imports under Python 3.11 with msgspec, renderers and verifiers from PyPI (README, contract
section). The policy pool needs vLLM, so the episode test hands the algorithm a scorer returning known logprobs, and
a renderer stand-in for the hint message (the tokenizer needs a hub download).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.contract.conftest import contract_pythonpath, prime_rl_src
from tests.support.traces import SYSTEM, TASK, assistant, build_trace, exchange, tool_call

ROOT = Path(__file__).resolve().parents[3]
TOMLS = sorted((ROOT / "tomls").glob("*-composer.toml"))
RECIPES = sorted((ROOT / "recipes").glob("*.toml"))
EXPECTED_ALGO = {"grpo-baseline": ("grpo", "GRPOAlgorithm"), "opsd-baseline": ("opsd", "OPSDAlgorithm")}

PARSE_SCRIPT = """
import json, sys
from prime_rl.configs.rl import RLConfig
from prime_rl.utils.config import cli
from prime_rl.orchestrator.algo import build_algorithm
out = []
for files in json.loads(sys.argv[1]):
    config = cli(RLConfig, args=[x for f in files for x in ("@", f)])
    algos = [config.orchestrator.algo] + [source.algo for source in config.orchestrator.train.source]
    built = [type(build_algorithm(algo, None)).__name__ for algo in algos]
    out.append({"files": files, "types": [a.type for a in algos], "built": built,
                "loss": [config.trainer.loss.type, config.trainer.loss.import_path],
                "algo": config.orchestrator.algo.model_dump(mode="json")})
print(json.dumps(out))
"""


def test_every_toml_alone_and_with_every_recipe_parses_in_a_fresh_interpreter(verifiers_snapshot):
    combos = [[str(t)] for t in TOMLS] + [[str(t), str(r)] for t in TOMLS for r in RECIPES]
    assert len(TOMLS) == 4 and len(RECIPES) >= 6
    src = prime_rl_src()
    env = {**os.environ, "PYTHONPATH": contract_pythonpath(src)}
    # No import of composer_prime here: only the installed .pth line can register the algorithm.
    result = subprocess.run(
        [sys.executable, "-c", PARSE_SCRIPT, json.dumps(combos)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(parsed) == len(combos)
    for item in parsed:
        recipe = Path(item["files"][-1]).stem if len(item["files"]) == 2 else None
        algo_type, cls = EXPECTED_ALGO.get(recipe, ("composer", "ComposerAlgorithm"))
        assert item["types"] == [algo_type] * 3, item
        assert item["built"] == [cls] * 3, item
        expected_loss = "prime_rl_default_loss" if recipe == "grpo-baseline" else "composer_loss"
        assert item["loss"] == ["custom", f"composer_prime.loss.{expected_loss}"], item
        hints, replay = item["algo"].get("hints", {}).get("enabled"), item["algo"].get("replay", {}).get("enabled")
        if recipe is None:  # the launch configs run all three channels (hints on by the code default)
            assert hints and replay, item
        if recipe == "rlvr-only":
            assert not hints and not replay, item
        if recipe == "no-hint":
            assert not hints and replay, item
        if recipe == "no-replay":
            assert hints and not replay, item


SEAM_SCRIPT = """
import json
import prime_rl.configs.algorithm as algorithm
from prime_rl.configs.orchestrator import OrchestratorConfig
from prime_rl.orchestrator.algo import ALGORITHM_CLASSES, build_algorithm
algo = OrchestratorConfig.model_validate({"algo": {"type": "composer"}}).algo
print(json.dumps({"seam": hasattr(algorithm, "ALGORITHM_PLUGIN_GROUP"),
                  "plugins": [c.model_fields["type"].default for c in getattr(algorithm, "ALGORITHM_PLUGINS", ())],
                  "patched_dict": "composer" in ALGORITHM_CLASSES, "built": type(build_algorithm(algo, None)).__name__,
                  "hint_renderer": type(algo.renderer).__name__}))
"""


def test_composer_registers_through_the_entry_point_where_prime_rl_has_the_seam_else_through_the_hook(
    verifiers_snapshot,
):
    """PRIME-RL 559b447 has no plugin seam: the `.pth` hook patches the union and ALGORITHM_CLASSES. A PRIME-RL with
    the `prime_rl.algorithms` entry-point group (docs/upstream/prime-rl-algorithm-plugins.patch applied) loads the
    config through composer-prime's entry point, and the hook leaves both alone."""
    src = prime_rl_src()
    result = subprocess.run(
        [sys.executable, "-c", SEAM_SCRIPT],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": contract_pythonpath(src)},
        cwd=ROOT,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["built"] == "ComposerAlgorithm" and out["hint_renderer"] == "AutoRendererConfig"
    if out["seam"]:
        assert out["plugins"] == ["composer"] and not out["patched_dict"]
    else:
        assert out["plugins"] == [] and out["patched_dict"]


# --- a hand-built episode through ComposerAlgorithm, trace_to_samples and compute_loss -------------------------------

HINT_IDS = [9001, 9002, 9003]
REF = -0.2  # every token's logprob under the hint context, from the stand-in scorer
SAMPLED = -0.5  # every sampled token's logprob at sampling time (tests/support/traces.py)


def episode_trace(reward: float, teacher: bool):
    """Failed tool call (node 2), a passing step (node 4), a summary (node 7) ending branch 0, a final step (node 9)
    on branch 1. The teacher scores node 4 at -1 by both teachers and leaves node 2 unscored."""
    info = {}
    if teacher:
        info["teacher"] = {
            "teachers": ["a", "b"],
            "steps": [{"node": 4, "scores": {"a": -1.0, "b": -1.0}, "hint": None}, {"node": 99, "scores": {"a": 0.5}}],
            "cost_usd": 0.02,
            "skipped": None,
        }
    trace = build_trace(
        [
            [
                SYSTEM,
                TASK,
                *exchange("a", "view", "Error: nope.py does not exist.", path="nope.py"),
                *exchange("b", "bash", "m.py\n[exit code 0]", command="ls"),
                {"role": "user", "content": "Summarise your progress."},
                assistant("looked around; m.py holds the code"),
            ],
            [
                SYSTEM,
                TASK,
                {"role": "user", "content": "<summary>...</summary>"},
                assistant("", tool_call("c", "finish")),
            ],
        ],
        info=info,
    )
    trace.ok = True
    trace.record_reward("tests", reward)
    return trace


def ref_at(position: int) -> float:
    """The stand-in scorer's logprob at a position of the prefill request: position-dependent, so a reference window
    shifted by one token reads other values and fails."""
    return REF - 0.001 * position


class Scorer:
    """Stands in for `InferencePool.score`: one logprob per token, `ref_at(position)`, 0.0 first (as vLLM's prefill)."""

    def __init__(self):
        self.requests: list[list[int]] = []

    async def score(self, token_ids: list[int]) -> list[float]:
        self.requests.append(list(token_ids))
        return [0.0] + [ref_at(i) for i in range(1, len(token_ids))]


class Renderer:
    def render_ids(self, messages, add_generation_prompt=False):
        assert not add_generation_prompt and messages[0]["role"] == "user"
        return list(HINT_IDS)


def composer_loss_on(samples, dtype, rl_weights: bool = False):
    """PRIME-RL's `compute_loss` with `composer_loss` (kl_tau 0) over training samples, trainer == inference logprobs
    (ratio 1), scales 1; returns the trainer logprob tensors (with grad) and the loss."""
    from prime_rl.configs.trainer import CustomLossConfig
    from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn

    loss_fn = setup_rl_loss_fn(
        CustomLossConfig(import_path="composer_prime.loss.composer_loss", kwargs={"kl_tau": 0.0, "hint_gate": "none"})
    )
    trainer = [torch.tensor(s.logprobs, dtype=dtype, requires_grad=True) for s in samples]
    loss, _ = compute_loss(
        trainer_logprobs=trainer,
        inference_logprobs=[torch.tensor(s.logprobs, dtype=dtype) for s in samples],
        ref_logprobs=[torch.tensor(s.ref_logprobs or [0.0] * len(s.token_ids), dtype=dtype) for s in samples],
        advantages=[torch.tensor(s.advantages, dtype=dtype) for s in samples],
        loss_mask=[torch.tensor(s.mask) for s in samples],
        rl_weights=[torch.tensor(s.rl_weights, dtype=dtype) for s in samples] if rl_weights else None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=loss_fn,
        rl_scale=1,
        ce_scale=1,
        ref_kl_scale=1,
    )
    return trainer, loss


def run_group(algo: dict, passing_teacher: bool):
    """Build the `composer` algorithm from `[orchestrator.algo]` settings through PRIME-RL's `build_algorithm`, then run
    a group of a passing and a failing episode through `finalize_episode` and `finalize_group`, as PRIME-RL's
    orchestrator does; returns the algorithm, the stand-in scorer and the (passing, failing) traces."""
    import verifiers.v1 as vf
    from prime_rl.configs.algorithm import AlgoConfig
    from prime_rl.orchestrator.algo import build_algorithm
    from pydantic import TypeAdapter

    scorer = Scorer()
    algorithm = build_algorithm(TypeAdapter(AlgoConfig).validate_python(algo), scorer)
    algorithm.renderer = Renderer()
    passing, failing = episode_trace(1.0, teacher=passing_teacher), episode_trace(0.0, teacher=False)
    episodes = [vf.Episode(task=t.task, traces=[t], ok=True) for t in (passing, failing)]

    async def orchestrate():
        for episode in episodes:
            await algorithm.finalize_episode(episode)
        await algorithm.finalize_group(episodes)

    asyncio.run(orchestrate())
    return algorithm, scorer, (passing, failing)


def test_episode_through_composer_algorithm_trace_to_samples_and_compute_loss(verifiers_snapshot):
    from prime_rl.orchestrator.trajectories import trace_to_samples

    algorithm, scorer, (passing, failing) = run_group(
        {"type": "composer", "hints": {"enabled": True}, "replay": {"replay_coef": 0.5, "min_teachers": 2}},
        passing_teacher=True,
    )
    assert type(algorithm).__name__ == "ComposerAlgorithm"

    # One hint target per trace: the failed tool call (node 2); its prefill request is the branch up to it, the hint,
    # then its own tokens.
    assert len(scorer.requests) == 2
    prefix = [t for i in (0, 1) for t in passing.nodes[i].token_ids]
    assert scorer.requests[0] == prefix + HINT_IDS + passing.nodes[2].token_ids
    # The target's sampled tokens are its last 3 (after SCAFFOLD template tokens), at the end of the request.
    start = len(scorer.requests[0]) - 3
    expected_ref = [ref_at(start + j) for j in range(3)]
    assert passing.nodes[2].reference_logprobs == expected_ref
    assert all(passing.nodes[i].reference_logprobs is None for i in (4, 7, 9))
    assert passing.metrics["composer/algo/hint/targets"] == 1.0
    assert passing.metrics["composer/algo/replay/steps"] == 1.0
    assert passing.metrics["composer/algo/replay/skipped/not_a_sampled_node"] == 1.0

    samples = trace_to_samples(passing)
    assert len(samples) == 2  # one per branch: before and after the summary
    first, second = samples
    # Outcome +0.5 on every sampled token (the summary turn included); node 4 also gets 0.5 * -1 from the teachers.
    spans = {}
    offset = 0
    for i in (0, 1, 2, 3, 4, 5, 6, 7):
        spans[i] = range(offset, offset + len(passing.nodes[i].token_ids))
        offset += len(passing.nodes[i].token_ids)
    node2_sampled = [k for k in spans[2] if first.mask[k]]
    for k, sampled in enumerate(first.mask):
        node = next(i for i, span in spans.items() if k in span)
        expected = (0.0 if node == 4 else 0.5) if sampled else 0.0
        assert first.advantages[k] == pytest.approx(expected), (k, node)
        assert first.ref_logprobs[k] == (expected_ref[k - node2_sampled[0]] if node == 2 and sampled else 0.0), (
            k,
            node,
        )
    assert sum(first.mask) == 9 and all(a == 0.5 for a, m in zip(second.advantages, second.mask, strict=True) if m)
    assert second.ref_logprobs is None

    # The trainer: trainer == inference logprobs (ratio 1), so d loss / d logp = -(A + w * (ref - logp)) / scale on
    # the mask. The hint part is non-zero exactly on node 2's sampled tokens.
    trainer, loss = composer_loss_on(samples, torch.float64)
    loss.backward()
    # sample 0: 9 loss tokens, 3 hint tokens: w = min(0.02 * 9 / 3, 1) = 0.06; gap = REF - SAMPLED = 0.3
    w = 0.06
    hint_part = [g + a for g, a in zip(trainer[0].grad.tolist(), first.advantages, strict=True)]
    for k, value in enumerate(hint_part):
        node = next(i for i, span in spans.items() if k in span)
        on_target = node == 2 and first.mask[k]
        gap = expected_ref[k - node2_sampled[0]] - SAMPLED if on_target else 0.0
        assert value == pytest.approx(-w * gap, abs=1e-12), (k, node)
    assert trainer[1].grad.tolist() == pytest.approx([-a for a in second.advantages])
    assert math.isfinite(loss.item())


def test_sibling_hints_through_prime_rl_hooks_reach_the_failed_traces_samples(verifiers_snapshot):
    """`hints.siblings`: at `finalize_group` the failed trace of a group with a success gets sibling targets on its
    latest steps (after its own evidence target), scored through the pool, and PRIME-RL's `trace_to_samples` ships
    them in the reference stream; the passing trace gets none."""
    from prime_rl.orchestrator.trajectories import trace_to_samples

    _, scorer, (passing, failing) = run_group(
        {"type": "composer", "hints": {"siblings": True, "sibling_targets_per_trace": 2}, "replay": {"enabled": False}},
        passing_teacher=False,
    )
    targeted = [
        [n for n, node in enumerate(t.nodes) if node.reference_logprobs is not None] for t in (passing, failing)
    ]
    # each trace's own evidence target (the failed tool call, node 2); the failing one also, beside it, its two latest
    # non-summary steps without a hint (node 9, the finish after the summary, and node 4)
    assert targeted == [[2], [2, 4, 9]]
    assert len(scorer.requests) == 4
    assert failing.metrics["composer/algo/hint/sibling_targets"] == 2.0
    assert passing.metrics["composer/algo/hint/sibling_targets"] == 0.0
    hinted = [v for sample in trace_to_samples(failing) for v in (sample.ref_logprobs or []) if v != 0.0]
    assert len(hinted) == 3 * 3


def test_a_loss_kwargs_typo_fails_when_prime_rl_parses_the_toml(tmp_path, verifiers_snapshot):
    # The hook validates [trainer.loss.kwargs] of composer_loss at config parse (the launcher), not at the first loss
    # call on the trainer.
    typo = tmp_path / "typo.toml"
    typo.write_text("[trainer.loss.kwargs]\nhint_coeff = 0.1\n")
    script = (
        "import sys\nfrom prime_rl.configs.rl import RLConfig\nfrom prime_rl.utils.config import cli\n"
        "cli(RLConfig, args=['@', sys.argv[1], '@', sys.argv[2]])\n"
    )
    env = {**os.environ, "PYTHONPATH": contract_pythonpath(prime_rl_src())}
    result = subprocess.run(
        [sys.executable, "-c", script, str(TOMLS[0]), str(typo)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=300,
    )
    assert result.returncode != 0
    assert "unknown key 'hint_coeff' = 0.1" in result.stderr and "hint_coef" in result.stderr


def test_rejected_summary_attempts_reach_no_training_sample(verifiers_snapshot):
    # composer-agent resamples an empty summary from the same request: both attempts hang off the summary request,
    # each ending a branch. `exclude_rejected` runs right after the attempts (before the resumed branch exists);
    # then PRIME-RL's trace_to_samples trains the turn before the compaction once, the accepted summary once, and the
    # rejected attempt never.
    from prime_rl.orchestrator.trajectories import trace_to_samples

    from composer_agent.compaction import exclude_rejected

    request = {"role": "user", "content": "Summarise your progress."}
    prefix = [SYSTEM, TASK, *exchange("a", "bash", "m.py\n[exit code 0]", command="ls"), request]
    trace = build_trace(
        [
            [*prefix, assistant("", tokens=2)],  # node 5: the rejected (empty) attempt
            [*prefix, assistant("looked around; m.py holds the code")],  # node 6: the accepted summary
        ]
    )
    assert [trace.nodes[i].message.role for i in (5, 6)] == ["assistant", "assistant"]
    assert exclude_rejected(trace, first_node=5, accepted=True) == 1
    samples = trace_to_samples(trace)
    trained = []
    for sample in samples:
        offset = 0
        for node in sample_nodes(trace, sample):
            span = sample.mask[offset : offset + len(node.token_ids)]
            if any(span):
                trained.append(trace.nodes.index(node))
            offset += len(node.token_ids)
    assert sorted(trained) == [2, 6]  # the tool call once and the accepted summary; never node 5


def sample_nodes(trace, sample):
    """The nodes of the branch whose token ids the sample carries."""
    return next(b.nodes for b in trace.branches if b.token_ids == sample.token_ids)


# --- PRIME-RL's episode consumer (TrainSink.add) with the policy pool on a real HTTP server --------------------------


async def consume_through_train_sink(config, algorithm, episodes, group_size: int):
    """PRIME-RL's `TrainSink.add` per episode, in arrival order, as `Orchestrator.main_loop` calls it. Returns the
    seconds each `add` held the consumer and the batch the last one cut."""
    from prime_rl.orchestrator.train_sink import TrainSink
    from prime_rl.orchestrator.types import Progress

    env = SimpleNamespace(
        algorithm=algorithm, config=SimpleNamespace(group_size=group_size), sampling_args={"temperature": 1.0}
    )
    sink = TrainSink(
        config,
        tokenizer=None,
        train_envs=SimpleNamespace(get=lambda name: env),
        mm_token_type_ids_mapping=None,
        progress=Progress(),
        batch_size=len(episodes),
        token_batch_size=None,
    )
    held, batch = [], None
    for episode in episodes:
        start = time.perf_counter()
        batch = await sink.add(episode)
        held.append(time.perf_counter() - start)
    return held, batch


def test_train_sink_consumer_is_not_serialised_by_hint_scoring(verifiers_snapshot):
    """Two groups of 4 episodes arrive interleaved; the pool answers each prefill after 1 s. PRIME-RL's consumer hands
    each episode over at once and waits only where a group is compiled, for that group's scores still in flight; at
    most `max_concurrent_scores` (6) requests reach the pool at once."""
    import httpx
    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.algo import build_algorithm

    from composer_prime.local.inference import prefill
    from tests.support.prefill_server import PrefillServer

    delay, limit = 1.0, 6
    config = OrchestratorConfig.model_validate(
        {"algo": {"type": "composer", "hints": {"enabled": True, "max_concurrent_scores": limit}}}
    )
    run = vf.TrainRunInfo(id="run", work=vf.TrainWorkInfo(step=1, policy=vf.PolicySpan(start=0, end=0)))
    episodes = []
    for k in range(8):
        trace = episode_trace(float(k % 2), teacher=False)
        episodes.append(
            vf.Episode(
                task=trace.task,
                traces=[trace],
                ok=True,
                env=vf.EnvInfo(name="env"),
                group=vf.GroupInfo(id="ab"[k % 2]),
                run=run,
            )
        )

    with PrefillServer(delay_s=delay) as server:

        async def orchestrate():
            async with httpx.AsyncClient(timeout=60) as client:
                pool = SimpleNamespace(score=lambda ids: prefill(client, server.url, "policy", ids))
                algorithm = build_algorithm(config.algo, pool)
                algorithm.renderer = Renderer()
                start = time.perf_counter()
                held, batch = await consume_through_train_sink(config, algorithm, episodes, group_size=4)
                return held, batch, time.perf_counter() - start

        held, batch, wall = asyncio.run(orchestrate())

    assert max(held[:6]) < 0.1 * delay  # episodes before group a's last: handed over without waiting
    # group a's last episode (6) waits for the second wave of requests (2 s); episode 7, handed over only then, one
    # round trip more: about 3 s in all, against 8 s when every episode's scores were awaited on arrival
    assert wall < 4 * delay
    assert server.requests == 8 and server.max_active == limit
    # Both groups are uniform (a all fail, b all pass): PRIME-RL's zero-advantage filter keeps only each trace's
    # first branch, whose hint tokens `score_group` marked (credit.HINT_MARK), which it can only do once the group's
    # references are in: without the wait there, the batch would be empty.
    assert batch is not None and len(batch.samples) == 8
    # the references reached PRIME-RL's samples: node 2's 3 sampled tokens of every trace
    assert sum(1 for s in batch.samples for v in (s.ref_logprobs or []) if v != 0.0) == 8 * 3
    targets = [e.traces[0].nodes[2].reference_logprobs for e in episodes]
    assert targets == [[-0.25] * 3] * 8
    assert all(e.traces[0].metrics["composer/algo/hint/targets"] == 1.0 for e in episodes)


# --- router replay (tomls/qwen3-30b-a3b-composer.toml): routed experts through the composer algorithm -----------------

LAYERS, TOP_K = 3, 2


def experts_of(token_id: int) -> list[list[int]]:
    """The experts vLLM routed a token to, per layer: distinct per token and per layer, so a shifted, dropped or
    reordered row fails."""
    return [[(token_id * 7 + layer * 3 + k) % 128 for k in range(TOP_K)] for layer in range(LAYERS)]


def with_routed_experts(trace):
    """Every node carries its tokens' routing as verifiers attributes it from vLLM's answer (`MessageNode.
    routed_experts`, uint8 `[len(token_ids), layers, top_k]`)."""
    import numpy as np

    for node in trace.nodes:
        node.routed_experts = np.array([experts_of(t) for t in node.token_ids], dtype=np.uint8)
    return trace


def test_routed_experts_survive_the_composer_algorithm_through_train_sink(verifiers_snapshot):
    """With router replay on, PRIME-RL ships each branch's routed experts on its training sample
    (`trace_to_samples`) and the trainer replays them token by token (`prepare_sample` asserts they align with
    input_ids). Through PRIME-RL's `TrainSink.add` with the composer algorithm (hint targets scored and replay credit
    assigned on the nodes), every sample of every branch carries, at each position, the experts of exactly the token
    there: the branch with the hint target (its reference stream), the branch with teacher replay credit, and the
    branch after the summary. The hint's own prefill request is scored, never trained, so it needs no routing."""
    import numpy as np
    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.algo import build_algorithm
    from prime_rl.trainer.batch import prepare_sample

    config = OrchestratorConfig.model_validate(
        {"algo": {"type": "composer", "hints": {"enabled": True}, "replay": {"replay_coef": 0.5, "min_teachers": 2}}}
    )
    run = vf.TrainRunInfo(id="run", work=vf.TrainWorkInfo(step=1, policy=vf.PolicySpan(start=0, end=0)))
    traces = [with_routed_experts(episode_trace(1.0, teacher=True)), with_routed_experts(episode_trace(0.0, False))]
    episodes = [
        vf.Episode(task=t.task, traces=[t], ok=True, env=vf.EnvInfo(name="env"), group=vf.GroupInfo(id="g"), run=run)
        for t in traces
    ]
    scorer = Scorer()

    async def orchestrate():
        algorithm = build_algorithm(config.algo, scorer)
        algorithm.renderer = Renderer()
        return await consume_through_train_sink(config, algorithm, episodes, group_size=2)

    _, batch = asyncio.run(orchestrate())

    assert batch is not None and len(batch.samples) == 4  # two traces, two branches each (before/after the summary)
    assert len(scorer.requests) == 2  # one hint target per trace was scored
    hinted = [s for s in batch.samples if any(v != 0.0 for v in s.ref_logprobs or [])]
    replayed = [s for s in batch.samples if any(m and a == 0.0 for m, a in zip(s.mask, s.advantages, strict=True))]
    assert len(hinted) == 2 and len(replayed) == 1  # node 2 of each trace; node 4 of the passing one (0.5 - 0.5)
    for sample in batch.samples:
        routed = sample.routed_experts
        assert routed is not None, "the sample lost its routed experts"
        assert routed.shape == [len(sample.token_ids), LAYERS, TOP_K] and routed.dtype == "uint8"
        rows = np.frombuffer(routed.data, dtype=routed.dtype).reshape(routed.shape)
        assert rows.tolist() == [experts_of(t) for t in sample.token_ids]
        micro = prepare_sample(sample, seq_len=4096)  # the trainer's side: its alignment asserts run here
        assert micro.routed_experts.shape[0] == len(micro.input_ids) == len(sample.token_ids)
        assert micro.routed_experts.data == routed.data
