"""Live sessions through PRIME-RL 559b447's own code: a replayed session through `trace_to_samples` and
`compute_loss` (the serving-time logprobs become the trainer's `inference_logprobs`, so PRIME-RL's trust region masks
what drifted); the `realtime-sessions` taskset drawn by PRIME-RL's curriculum sampler (and resumed by it), its bundle
run by the replay env and trained through PRIME-RL's `TrainSink` with the composer algorithm; and the cluster TOML's
train phase through PRIME-RL's launcher (`rl --dry-run`)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid

import pytest

from tests.contract.conftest import run_with_prime_rl
from tests.support.tokenizer import tiny_tokenizer

SESSION = {
    "schema": "composer-session",
    "version": 1,
    "kind": "session",
    "session_id": "live-1",
    "policy_version": 3,
    "sampling": {"temperature": 1.0},
    "started_at": 0.0,
    "ended_at": 10.0,
    "branches": [
        {
            "segments": [
                {"token_ids": [1, 2, 3], "sampled": False},
                {"token_ids": [4, 5], "sampled": True, "logprobs": [-0.5, -1.5]},
                {"token_ids": [6], "sampled": False},
                {"token_ids": [7], "sampled": True, "logprobs": [-2.0]},
            ]
        }
    ],
}


def test_trace_to_samples_carries_the_serving_logprobs_and_the_trust_region_applies(verifiers_snapshot):
    import torch
    from prime_rl.configs.trainer import DefaultLossConfig
    from prime_rl.orchestrator.trajectories import trace_to_samples
    from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn

    from composer_prime.realtime.ingest.traces import session_trace
    from composer_prime.realtime.records import SessionRecord

    trace = session_trace(SessionRecord.model_validate(SESSION), reward=1.0)
    (sample,) = trace_to_samples(trace)
    assert sample.token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert sample.mask == [False, False, False, True, True, False, True]
    assert sample.logprobs == [0.0, 0.0, 0.0, -0.5, -1.5, 0.0, -2.0]

    # The trainer now gives token 4 probability exp(-0.1) (0.90 vs 0.61 served: +0.30 > the 0.2 DPPO band), tokens 5
    # and 7 their served logprobs: PRIME-RL's default loss drops token 4 from the policy-gradient term and keeps 5
    # and 7 (ratio 1, advantage 1); only its drift term kl_tau * log_ratio^2 still reaches token 4.
    config = DefaultLossConfig()
    trainer = torch.tensor([0.0, 0.0, 0.0, -0.1, -1.5, 0.0, -2.0], requires_grad=True)
    loss, _ = compute_loss(
        trainer_logprobs=[trainer],
        inference_logprobs=[torch.tensor(sample.logprobs)],
        ref_logprobs=None,
        advantages=[torch.ones(7)],
        loss_mask=[torch.tensor(sample.mask)],
        rl_weights=None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=setup_rl_loss_fn(config),
        rl_scale=3,
        ce_scale=1,
        ref_kl_scale=1,
    )
    loss.backward()
    # loss = (-(1 + 1) + kl_tau * 0.4^2) / 3; d loss / d trainer[3] = 2 * kl_tau * 0.4 / 3 (no policy-gradient part)
    assert float(loss.detach()) == pytest.approx((-2.0 + config.kl_tau * 0.16) / 3, abs=1e-6)
    assert float(trainer.grad[3]) == pytest.approx(2 * config.kl_tau * 0.4 / 3, abs=1e-6)
    assert float(trainer.grad[4]) != 0.0 and float(trainer.grad[6]) != 0.0


def spool_session(sid: str, sampled: list[int], logprobs: list[float], user: str = "u", group: str = "") -> dict:
    ended = time.time() - 60
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "policy_version": 0,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 30,
        "ended_at": ended,
        "user": user,
        "group": group,
        "branches": [
            {
                "segments": [
                    {"token_ids": [1, 2, 3], "sampled": False},
                    {"token_ids": sampled, "sampled": True, "logprobs": logprobs},
                ]
            }
        ],
    }


def spool_signal(sid: str, kept: bool) -> dict:
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": time.time() - 30,
        "signal": {"type": "edit", "kept": kept, "after_s": 20},
    }


def draw(sampler, timeout_s: float = 60.0):
    """The sampler's next task, as PRIME-RL's patched `TrainSource.next_task` gets it: "not ready" (the spool read
    runs in a thread) is asked again later; the iterator that said it stays usable."""
    from composer_prime.realtime.ingest.readiness import TaskNotReady

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return next(sampler)
        except TaskNotReady:
            assert time.monotonic() < deadline, "the spool read never finished"
            time.sleep(0.02)


def test_bundles_drawn_by_prime_rls_sampler_train_through_its_train_sink_with_serving_logprobs(
    tmp_path, verifiers_snapshot
):
    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.curriculum import Curriculum
    from prime_rl.orchestrator.envs import TrainEnvs
    from prime_rl.orchestrator.train_sink import TrainSink
    from prime_rl.orchestrator.types import Progress
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.utils.loaders import load_environment

    spool = tmp_path / "spool"
    spool.mkdir()
    records = [
        spool_session("a", [4, 5], [-0.5, -1.5]),
        spool_signal("a", True),
        spool_session("b", [6], [-2.0]),
        spool_signal("b", False),
        "not json",
        spool_session("c", [7], [-0.3]),
        spool_signal("c", True),
        spool_session("d", [8], [-0.4]),
        spool_signal("d", True),
    ]
    (spool / "a.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    source = {
        "name": "realtime",
        "group_size": 1,
        "env": {
            "taskset": {
                "id": "realtime-sessions",
                "spool": {"dir": str(spool), "signal_window_s": 0},
                "pii": {"tokenizer": tiny_tokenizer()},
                "journal": str(tmp_path / "journal"),
                "bundle_size": 2,
            },
            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
        },
    }
    config = OrchestratorConfig.model_validate(
        {
            "batch_size": 2,
            "train": {"source": [source]},
            "algo": {"type": "composer", "hints": {"enabled": False}, "replay": {"enabled": False}},
        }
    )
    [source_config] = config.train.source
    assert type(source_config.env).__name__ == "ReplayEnvConfig"  # PRIME-RL narrows the env to the taskset's own

    # PRIME-RL's orchestrator: an INFINITE taskset streams (`envs.py`), its curriculum sampler draws one bundle.
    curriculum = Curriculum(source_config.curriculum, iter(vf.load_taskset(source_config.env.taskset)))
    first = draw(curriculum.sampler)
    checkpoint = curriculum.state_dict()
    curriculum.sampler.task_iterator.close()  # the orchestrator stops
    resumed = Curriculum(source_config.curriculum, iter(vf.load_taskset(source_config.env.taskset)))
    resumed.load_state_dict(checkpoint)  # PRIME-RL's resume: draw and discard what the checkpoint counted
    second = draw(resumed.sampler)
    resumed.sampler.task_iterator.close()
    assert [e.session_id for e in first.data.sessions] == ["a", "b"]
    assert [e.session_id for e in second.data.sessions] == ["c", "d"]  # not a, b again: the journal replayed them

    # The env server (the bundle's task data over the wire) and the train sink, as the dispatcher stamps an episode.
    envs = TrainEnvs(config.train.source, {("train", "realtime"): "tcp://127.0.0.1:1"}, policy_pool=None)
    progress = Progress()
    sink = TrainSink(
        config,
        tokenizer=None,
        train_envs=envs,
        mm_token_type_ids_mapping=None,
        progress=progress,
        batch_size=2,
        token_batch_size=None,
    )
    env = load_environment(source_config.env)
    task = type(first)(type(first.data).model_validate(first.data.model_dump(mode="json")), env.config.taskset.task)
    ctx = ModelContext(model="never-called", client=vf.EvalClientConfig(base_url="http://127.0.0.1:9/v1"))

    async def orchestrate():
        async with env.serving():
            episode = await asyncio.wait_for(env.run_episode(task, ctx), 120)
        episode.env.name = "realtime"  # dispatcher.emit_episode
        episode.group = vf.GroupInfo(id=str(uuid.uuid4()))
        work = vf.TrainWorkInfo(step=progress.step, policy=vf.PolicySpan(start=0, end=0))
        episode.record_run(vf.TrainRunInfo(id="run", name="run", work=work))
        return episode, await sink.add(episode)

    episode, batch = asyncio.run(orchestrate())
    assert episode.ok and len(episode.traces) == 2
    assert batch is not None and len(batch.samples) == 2
    a, b = batch.samples
    assert a.token_ids == [1, 2, 3, 4, 5] and a.logprobs == [0.0, 0.0, 0.0, -0.5, -1.5]  # serving logprobs intact
    assert b.token_ids == [1, 2, 3, 6] and b.logprobs == [0.0, 0.0, 0.0, -2.0]
    # composer credit over the bundle (group_size 1: the episode is the group): reward (+1 kept, -1 reverted) minus
    # the bundle mean 0, on sampled tokens only; the trainer recomputes logprobs at the source's temperature 1.0.
    assert a.advantages == [0.0, 0.0, 0.0, 1.0, 1.0] and b.advantages == [0.0, 0.0, 0.0, -1.0]
    assert set(a.temperatures) == {1.0}
    assert episode.traces[0].metrics["composer/realtime/malformed"] == 1.0


def run_bundles_through_train_sink(tmp_path, sessions: list[tuple], caps: dict, bundle_size: int, **batch) -> tuple:
    """The bundles of a spool of `sessions` ((user, group, kept) in read order; session i samples token 4 + i),
    replayed by the env server and added to PRIME-RL's `TrainSink` one episode at a time (the import hook patched
    it); returns (what each `add` returned, the sink)."""
    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.envs import TrainEnvs
    from prime_rl.orchestrator.train_sink import TrainSink
    from prime_rl.orchestrator.types import Progress
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.utils.loaders import load_environment

    spool = tmp_path / "spool"
    spool.mkdir()
    records = []
    for i, (user, group, kept) in enumerate(sessions):
        records += [spool_session(f"s{i}", [4 + i], [-0.5], user=user, group=group), spool_signal(f"s{i}", kept)]
    (spool / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    source = {
        "name": "realtime",
        "group_size": 1,
        "env": {
            "taskset": {
                "id": "realtime-sessions",
                "spool": {"dir": str(spool), "signal_window_s": 0},
                "pii": {"tokenizer": tiny_tokenizer()},
                "journal": str(tmp_path / "journal"),
                "bundle_size": bundle_size,
                **caps,
            },
            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
        },
    }
    config = OrchestratorConfig.model_validate(
        {
            **batch,
            "train": {"source": [source]},
            "algo": {"type": "composer", "hints": {"enabled": False}, "replay": {"enabled": False}},
        }
    )
    [source_config] = config.train.source
    tasks = iter(vf.load_taskset(source_config.env.taskset))
    bundles = [draw(tasks) for _ in range(len(sessions) // bundle_size)]
    tasks.close()
    envs = TrainEnvs(config.train.source, {("train", "realtime"): "tcp://127.0.0.1:1"}, policy_pool=None)
    progress = Progress()
    sink = TrainSink(
        config,
        tokenizer=None,
        train_envs=envs,
        mm_token_type_ids_mapping=None,
        progress=progress,
        batch_size=config.batch_size,
        token_batch_size=config.token_batch_size,
    )
    env = load_environment(source_config.env)
    ctx = ModelContext(model="never-called", client=vf.EvalClientConfig(base_url="http://127.0.0.1:9/v1"))

    async def orchestrate():
        batches = []
        async with env.serving():
            for bundle in bundles:
                task = type(bundle)(
                    type(bundle.data).model_validate(bundle.data.model_dump(mode="json")), env.config.taskset.task
                )
                episode = await asyncio.wait_for(env.run_episode(task, ctx), 120)
                assert episode.ok, episode
                episode.env.name = "realtime"  # dispatcher.emit_episode
                episode.group = vf.GroupInfo(id=str(uuid.uuid4()))
                work = vf.TrainWorkInfo(step=progress.step, policy=vf.PolicySpan(start=0, end=0))
                episode.record_run(vf.TrainRunInfo(id="run", name="run", work=work))
                batches.append(await sink.add(episode))
        return batches

    return asyncio.run(orchestrate()), sink


def batch_sessions(batch) -> list[int]:
    """The sessions of a batch's samples, by their one sampled token (session i samples token 4 + i)."""
    return [sample.token_ids[-1] - 4 for sample in batch.samples]


def test_prime_rls_train_sink_cuts_batches_that_hold_each_user_to_the_realtime_sources_cap(
    tmp_path, verifiers_snapshot
):
    # 8 sessions, 6 of them one user's, in 2 bundles of 4 (rewards +1, -1, +1, -1: none has zero advantage); a batch
    # is 4 traces and one user may hold half of what it keeps.
    users = ["hog", "hog", "hog", "ann", "hog", "hog", "hog", "bob"]
    sessions = [(u, "", i % 2 == 0) for i, u in enumerate(users)]
    batches, sink = run_bundles_through_train_sink(tmp_path, sessions, {"max_user_share": 0.5}, 4, batch_size=4)
    # Each bundle fills the window PRIME-RL cuts; hog keeps 1 of the 2 kept (cap_share: 2 of 4 kept, then 1 of 2), the
    # batch is cut from what the window kept, and nothing waits for users who may never come.
    assert [batch_sessions(b) for b in batches] == [[0, 3], [4, 7]]
    assert sink.realtime_capped == {"user_capped": 4}
    assert not sink.pending_batch and not sink.episode_by_trace
    # PRIME-RL's own step metrics of each batch carry its count (a trace metric's mean over the traces that have it).
    logged = batches[1].cohort.effective.metrics.to_wandb(prefix="train/agg", subset="effective")
    assert logged["train/agg/effective/agent/metrics/composer/realtime/user_capped/mean"] == 2.0
    assert logged["train/agg/effective/agent/metrics/composer/realtime/group_capped/mean"] == 0.0


def test_the_repository_cap_counts_each_sessions_own_repository_in_a_mixed_bundle(tmp_path, verifiers_snapshot):
    # Repositories with fewer sessions than a bundle share one bundle (group ""); the cap still sees each session's.
    sessions = [("u0", "big", True), ("u1", "big", False), ("u2", "big", True), ("u3", "rk", False)]
    batches, sink = run_bundles_through_train_sink(tmp_path, sessions, {"max_group_share": 0.5}, 4, batch_size=4)
    assert [batch_sessions(b) for b in batches] == [[0, 3]]
    assert sink.realtime_capped == {"group_capped": 2}


def test_the_user_cap_holds_again_after_the_repository_caps_drops(tmp_path, verifiers_snapshot):
    # One user in 5 small repositories, 5 others in one monorepo, one mixed bundle of 10: the repository cap keeps 1
    # monorepo session, which would leave the first user 5 of 6; the caps run again until both hold.
    sessions = [("bot", f"r{i}", i % 2 == 0) for i in range(5)] + [(f"u{i}", "mono", i % 2 == 1) for i in range(5)]
    caps = {"max_user_share": 0.5, "max_group_share": 0.2}
    batches, sink = run_bundles_through_train_sink(tmp_path, sessions, caps, 10, batch_size=10)
    assert [batch_sessions(b) for b in batches] == [[0, 5]]
    assert sink.realtime_capped == {"user_capped": 4, "group_capped": 4}


def test_sessions_that_filter_zero_advantages_drops_hold_no_share(tmp_path, verifiers_snapshot):
    # Bundle 1: hog's four sessions all kept (advantage 0 each: PRIME-RL drops them after the cut). Bundle 2: hog,
    # ann, hog, bob with +1, -1, +1, -1. Counted over what trains, hog holds 2 of 4 = the cap, so nothing is dropped;
    # counted over the window of 8, hog's 6 would lose 4, two of them sessions that train.
    sessions = [("hog", "", True)] * 4 + [("hog", "", True), ("ann", "", False), ("hog", "", True), ("bob", "", False)]
    batches, sink = run_bundles_through_train_sink(tmp_path, sessions, {"max_user_share": 0.5}, 4, batch_size=8)
    assert batches[0] is None
    assert batch_sessions(batches[1]) == [4, 5, 6, 7]
    assert not getattr(sink, "realtime_capped", None)


def test_a_token_budget_batch_holds_each_user_to_the_cap_of_what_it_keeps(tmp_path, verifiers_snapshot):
    # Each trace is 4 tokens (3 context + 1 sampled): a batch of 16 tokens is 4 traces before the cap.
    users = ["hog", "hog", "hog", "ann", "bob", "hog", "cy", "hog"]
    sessions = [(u, "", i % 2 == 0) for i, u in enumerate(users)]
    batches, sink = run_bundles_through_train_sink(tmp_path, sessions, {"max_user_share": 0.5}, 4, token_batch_size=16)
    # Bundle 1 reaches the target: 3 hog + ann keeps hog 1 of 2; bundle 2 (bob, hog, cy, hog) keeps hog 2 of 4.
    assert [batch_sessions(b) for b in batches] == [[0, 3], [4, 5, 6, 7]]
    assert sink.realtime_capped == {"user_capped": 2}
    assert sink.pending_tokens == 0 and not sink.pending_batch


DRY_RUN = """
import json, sys
from pathlib import Path
from prime_rl.entrypoints.rl import main
rl_toml, output_dir = sys.argv[1:3]
sys.argv = ["rl", "@", rl_toml, "--dry-run"]
main()
[run] = [p for p in Path(output_dir).iterdir() if (p / "configs").is_dir()]
orchestrator = json.loads((run / "configs" / "orchestrator.json").read_text())
env = json.loads((run / "configs" / "envs" / "train" / "realtime.json").read_text())
orch = [l for l in (run / "rl.sbatch").read_text().splitlines() if l.startswith("ORCH_PROCID=")]
print(json.dumps({"run": run.name, "orchestrator": orchestrator, "env": env, "orch": orch}))
"""


def test_prime_rl_launches_the_realtime_tomls_train_phase_dry_run(tmp_path, verifiers_snapshot):
    import tomli_w

    from composer_prime.cli import parse_config
    from composer_prime.realtime.cycle.cluster import rl_config
    from composer_prime.realtime.cycle.config import RealtimeConfig
    from tests.contract.seam.test_algorithm_contract import ROOT

    toml = ROOT / "tomls" / "qwen3-32b-realtime.toml"
    config = parse_config(
        RealtimeConfig,
        ["@", str(toml), "--state-dir", str(tmp_path / "state"), "--prime-rl.output-dir", str(tmp_path / "rl")],
        "realtime",
    )
    rl_toml = tmp_path / "rl.toml"
    rl_toml.write_text(tomli_w.dumps(rl_config(config)))  # what the runner writes to <state_dir>/rl.toml
    result = run_with_prime_rl(["-c", DRY_RUN, str(rl_toml), str(tmp_path / "rl")], cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["run"] == "realtime"  # a fixed run name: every launch of the runner resumes the same run
    [source] = out["orchestrator"]["train"]["source"]
    assert source["group_size"] == 1 and source["algo"]["type"] == "composer"
    assert source["sampling"]["temperature"] == 1.0
    assert source["algo"]["hints"]["enabled"] is False and source["algo"]["replay"]["enabled"] is False
    taskset = out["env"]["env"]["taskset"]
    assert taskset["id"] == "realtime-sessions" and taskset["spool"]["dir"] == "/data/realtime/spool"
    assert taskset["journal"] == str(tmp_path / "rl" / "realtime-journal") and taskset["staleness"]["mode"] == "drop"
    assert out["env"]["env"]["agent"]["harness"]["id"] == "realtime-replay"
    # The orchestrator (which reads the spool and the runner's state.json) runs on the first trainer node.
    assert out["orch"] == ["ORCH_PROCID=$NUM_INFER_NODES"]


@pytest.mark.timeout(120)
def test_while_the_spool_is_empty_prime_rls_dispatch_loop_keeps_turning_and_draws_the_bundle_when_it_lands(
    tmp_path, verifiers_snapshot
):
    """PRIME-RL's orchestrator pieces as `orchestrator.py` wires them (its `Env.start` against an env server, its
    `TrainSource`, its `Dispatcher.start` loop) over an empty spool: another coroutine on the loop keeps ticking while
    nothing is ready, the sampler counts no draw for "not ready", and the bundle is dispatched, replayed by the env
    server and emitted once the product writes sessions. A taskset that waits inside `next()` stalls the loop for the
    whole empty stretch and then for good: `fill_inflight` draws again right after the first bundle (it fills every
    permit), so not even that bundle's episode is emitted (this test then ends at its timeout)."""
    import queue
    import threading
    from types import SimpleNamespace

    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import OrchestratorConfig
    from prime_rl.orchestrator.dispatcher import Dispatcher
    from prime_rl.orchestrator.envs import TrainEnvs
    from prime_rl.orchestrator.train_source import TrainSource
    from prime_rl.orchestrator.types import Policy, Progress
    from verifiers.v1.serve.server import EnvServer

    spool = tmp_path / "spool"
    spool.mkdir()
    source = {
        "name": "realtime",
        "group_size": 1,
        "env": {
            "taskset": {
                "id": "realtime-sessions",
                "spool": {"dir": str(spool), "signal_window_s": 0},
                "pii": {"tokenizer": tiny_tokenizer()},
                "journal": str(tmp_path / "journal"),
                "bundle_size": 2,
                "poll_s": 0.2,
            },
            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
        },
    }
    config = OrchestratorConfig.model_validate(
        {
            "batch_size": 2,
            "train": {"source": [source]},
            "algo": {"type": "composer", "hints": {"enabled": False}, "replay": {"enabled": False}},
        }
    )
    [source_config] = config.train.source

    # The env server, in its own thread and event loop as in its own process under PRIME-RL's launcher.
    addresses: queue.Queue = queue.Queue()
    server_loop = asyncio.new_event_loop()
    served: list[asyncio.Task] = []

    def serve() -> None:
        asyncio.set_event_loop(server_loop)
        server = EnvServer(source_config.env, address="tcp://127.0.0.1:0")
        addresses.put(server.address)
        served.append(server_loop.create_task(server.run()))
        server_loop.run_until_complete(served[0])

    threading.Thread(target=serve, daemon=True).start()
    address = addresses.get(timeout=60)

    # The policy pool: the replay harness never calls a model, so only the client config it hands out is read.
    client = vf.EvalClientConfig(base_url="http://127.0.0.1:9/v1")
    pool = SimpleNamespace(train_client=client, eval_client=client, model_name="never-called")
    envs = TrainEnvs(config.train.source, {("train", "realtime"): address}, policy_pool=pool)
    empty_s = 2.5

    def product() -> None:  # the serving product writes two sessions and their signals after a quiet stretch
        time.sleep(empty_s)
        records = [
            spool_session("a", [4, 5], [-0.5, -1.5]),
            spool_signal("a", True),
            spool_session("b", [6], [-2.0]),
            spool_signal("b", False),
        ]
        (spool / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    async def orchestrate():
        await envs.start()  # PRIME-RL's Env.start: health check, then iter(taskset) for an INFINITE taskset
        train_source = TrainSource(envs)
        dispatcher = Dispatcher(
            train_envs=envs,
            eval_envs=None,
            train_source=train_source,
            eval_source=None,
            policy_pool=pool,
            policy=Policy(version=0, model_name="never-called"),
            progress=Progress(),
            initial_max_inflight=4,
            max_inflight_ceiling=4,
            tasks_per_minute=None,
            max_off_policy_steps=8,
            run_id="run",
            run_name="run",
        )
        ticks: list[float] = []

        async def tick():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.02)

        ticker = asyncio.create_task(tick())
        dispatch = asyncio.create_task(dispatcher.start())
        started = time.monotonic()
        writer = threading.Thread(target=product)
        writer.start()
        emitted = asyncio.create_task(dispatcher.out_q.get())
        try:
            await asyncio.wait([emitted, dispatch], timeout=120, return_when=asyncio.FIRST_COMPLETED)
            assert not dispatch.done(), f"PRIME-RL's dispatch loop ended: {dispatch.exception()!r}"
            assert emitted.done(), "no episode within 120 s"
        finally:
            emitted.cancel()
            await dispatcher.stop()
            ticker.cancel()
            writer.join()
        episode = emitted.result()
        quiet = [t for t in ticks if t < started + empty_s]
        return episode, train_source.curricula["realtime"].sampler, started, quiet

    try:
        episode, sampler, started, quiet = asyncio.run(orchestrate())
    finally:
        server_loop.call_soon_threadsafe(served[0].cancel)
    gaps = [b - a for a, b in itertools.pairwise(quiet)]
    # The loop kept turning through the empty stretch (a tick every 0.02 s asked; a blocked loop has one gap of the
    # whole stretch); the dispatcher asked the taskset on each of its passes and drew nothing until sessions landed.
    assert quiet and quiet[-1] - started > empty_s - 1.0 and max(gaps) < 1.0, (len(quiet), max(gaps, default=None))
    assert sampler.cursor == 1  # "not ready" was never counted as a draw: PRIME-RL's resume skip stays exact
    assert episode.ok and [t.info["realtime"]["session_id"] for t in episode.traces] == ["a", "b"]
    assert [len(t.branches) for t in episode.traces] == [1, 1]


def test_the_journal_prunes_below_prime_rls_oldest_kept_checkpoint_and_its_resume_lands_on_the_next_bundle(
    tmp_path, verifiers_snapshot
):
    """PRIME-RL's `TrainSource` draws bundles, its orchestrator `CheckpointManager` writes `progress.pt` at steps 2 and
    4, the trainer's keep_last removes step 2 (it deletes the whole step dir); the journal forgets what step 4 drew,
    and PRIME-RL's resume from step 4 (`CheckpointManager.load`) discards the placeholders and draws bundle 5."""
    import shutil

    import verifiers.v1 as vf
    from prime_rl.configs.orchestrator import CheckpointConfig, OrchestratorConfig
    from prime_rl.orchestrator.ckpt import CheckpointManager
    from prime_rl.orchestrator.envs import TrainEnvs
    from prime_rl.orchestrator.train_source import TrainSource
    from prime_rl.orchestrator.types import Progress

    spool, run_dir = tmp_path / "spool", tmp_path / "rl" / "realtime"
    spool.mkdir()
    records = [r for i in range(12) for r in (spool_session(f"s{i}", [4], [-0.5]), spool_signal(f"s{i}", i % 2 == 0))]
    (spool / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:16]))
    source = {
        "name": "realtime",
        "group_size": 1,
        "env": {
            "taskset": {
                "id": "realtime-sessions",
                "spool": {"dir": str(spool), "signal_window_s": 0},
                "pii": {"tokenizer": tiny_tokenizer()},
                "journal": str(tmp_path / "journal"),
                "bundle_size": 2,
                "poll_s": 0.05,
                "checkpoints": str(run_dir / "checkpoints"),
                "checkpoint_env": "realtime",
            },
            "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
        },
    }
    config = OrchestratorConfig.model_validate(
        {
            "batch_size": 2,
            "train": {"source": [source]},
            "algo": {"type": "composer", "hints": {"enabled": False}, "replay": {"enabled": False}},
        }
    )
    ckpt = CheckpointManager(run_dir, CheckpointConfig())

    def train_source() -> TrainSource:
        envs = TrainEnvs(config.train.source, {("train", "realtime"): "tcp://127.0.0.1:1"}, policy_pool=None)
        for env in envs:  # what Env.start does once the env server answers, for an INFINITE taskset
            env.tasks, env.num_tasks = iter(vf.load_taskset(env.config.env.taskset)), None
        return TrainSource(envs)

    def bundles(source: TrainSource, n: int) -> list:
        out = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            request = source.next_task(step=1)  # None: "not ready", the dispatcher's next pass asks again
            if request is None:
                time.sleep(0.02)
            else:
                out.append(request.task)
        assert len(out) == n
        return out

    first = train_source()
    drawn = bundles(first, 3)
    ckpt.save(Progress(step=2), first, step=2)
    drawn += bundles(first, 1)
    ckpt.save(Progress(step=4), first, step=4)
    shutil.rmtree(run_dir / "checkpoints" / "step_2")  # trainer/ckpt.py maybe_clean with keep_last = 1
    (spool / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[16:]))
    drawn += bundles(first, 1)  # the spool read that finds s8..s11 first prunes through step_4's draw count
    first.curricula["realtime"].sampler.task_iterator.close()  # the orchestrator dies
    assert sorted(int(p.stem) for p in (tmp_path / "journal" / "bundles").iterdir()) == [5, 6]
    assert json.loads((tmp_path / "journal" / "state.json").read_text())["pruned"] == 4

    resumed = train_source()
    ckpt.load(Progress(), resumed, step=4)  # StandardSampler.load_state_dict draws and discards 4 placeholders
    after = bundles(resumed, 2)
    resumed.curricula["realtime"].sampler.task_iterator.close()
    assert [t.data.bundle for t in after] == [5, 6] and not any(t.data.pruned for t in after)
    assert [e.session_id for t in after for e in t.data.sessions] == ["s8", "s9", "s10", "s11"]
    assert [e.session_id for t in drawn for e in t.data.sessions] == [f"s{i}" for i in range(10)]
