"""A bundle of logged sessions through verifiers as PRIME-RL runs it: the orchestrator side draws the task from the
`realtime-sessions` taskset and ships its data as JSON, the env side rebuilds it and runs the taskset's env with the
replay harness on the subprocess runtime. One trace per session, the logged tokens and serving logprobs intact, the
reward on `trace.rewards`; the model endpoint (a closed port) is never called."""

from __future__ import annotations

import asyncio
import json
import time

import verifiers.v1 as vf
from verifiers.v1.clients import ModelContext
from verifiers.v1.utils.loaders import load_environment, load_taskset, resolve_env_config

from tests.support.tokenizer import tiny_tokenizer
from tests.unit.realtime.ingest.test_realtime_source import append, draw


def session(sid: str, context: list[int], sampled: list[int], logprobs: list[float]) -> dict:
    ended = time.time() - 60
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "session",
        "session_id": sid,
        "group": "repo-1",
        "policy_version": 0,
        "sampling": {"temperature": 1.0},
        "started_at": ended - 30,
        "ended_at": ended,
        "user": "u",
        "branches": [
            {
                "segments": [
                    {"token_ids": context, "sampled": False},
                    {"token_ids": sampled, "sampled": True, "logprobs": logprobs},
                ]
            },
            {
                "segments": [
                    {"token_ids": [9, 9], "sampled": False},
                    {"token_ids": [5], "sampled": True, "logprobs": [-0.7]},
                ]
            },
        ],
    }


def signal(sid: str, **body) -> dict:
    return {
        "schema": "composer-session",
        "version": 1,
        "kind": "signal",
        "session_id": sid,
        "at": time.time() - 30,
        "signal": body,
    }


def test_a_bundle_becomes_one_episode_with_one_replayed_trace_per_session(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    append(
        spool / "a.jsonl",
        "{broken",
        session("a", [1, 2, 3], [10, 11], [-0.25, -1.5]),
        signal("a", type="edit", kept=True, after_s=60),
        session("b", [1, 2], [12, 13, 14], [-0.5, -0.1, -2.0]),
        signal("b", type="tests", passed=1, failed=3),
    )
    env_config = {
        "taskset": {
            "id": "realtime-sessions",
            "spool": {"dir": str(spool), "signal_window_s": 0},
            "pii": {"tokenizer": tiny_tokenizer()},
            "journal": str(tmp_path / "journal"),
            "bundle_size": 2,
        },
        "agent": {"harness": {"id": "realtime-replay"}, "runtime": {"type": "subprocess"}},
    }

    # Orchestrator side: the taskset, iterated lazily; the task travels as its data's JSON.
    config = resolve_env_config(env_config)
    stream = iter(load_taskset(config.taskset))
    [drawn] = draw(stream)
    stream.close()
    wire = json.loads(json.dumps(drawn.data.model_dump(mode="json")))

    # Env-server side: the taskset's env, the task rebuilt from the wire (verifiers' serve/server.py `_build_task`).
    env = load_environment(resolve_env_config(env_config))
    task = type(drawn)(type(drawn.data).model_validate(wire), env.config.taskset.task)
    ctx = ModelContext(model="never-called", client=vf.EvalClientConfig(base_url="http://127.0.0.1:9/v1"))

    async def run() -> vf.Episode:
        async with env.serving():
            return await asyncio.wait_for(env.run_episode(task, ctx), 120)

    episode = asyncio.run(run())
    assert episode.ok, episode.errors
    assert episode.task.key == "realtime-bundle-00000001"
    a, b = episode.traces
    assert [t.info["realtime"]["session_id"] for t in (a, b)] == ["a", "b"]
    assert [len(t.task.data.sessions) for t in (a, b)] == [1, 1]  # a run's task holds its session, not the bundle
    assert a.rewards["signals"].score == 1.0 and b.rewards["signals"].score == -1.0  # a failing test run: the floor
    assert [t.calls for t in (a, b)] == [[], []]  # no model call
    first = a.branches[0]
    assert first.token_ids == [1, 2, 3, 10, 11] and first.sampled_mask == [False] * 3 + [True] * 2
    assert first.logprobs[-2:] == [-0.25, -1.5]
    assert b.branches[0].logprobs[-3:] == [-0.5, -0.1, -2.0] and b.branches[1].logprobs[-1:] == [-0.7]
    assert a.metrics["composer/realtime/malformed"] == 1.0 and a.metrics["composer/realtime/sessions"] == 2.0
    assert "composer/realtime/malformed" not in b.metrics  # counts ride on a bundle's first trace only
    assert b.metrics["composer/realtime/age"] == 0.0
