"""The replay env and harness of the `realtime-sessions` source: a bundle of logged sessions becomes one episode with
one trace per session, without calling a model (docs/realtime.md, "The PRIME-RL source").

`ReplayEnv.run` starts one agent run per session of the bundle, each on a task holding that one session (`replay`
names its position); `ReplayHarness.launch` writes that session's token streams into the run's trace (`traces.branch_nodes`:
context segments unsampled, sampled segments with the serving engine's logprobs, which PRIME-RL's `trace_to_samples`
turns into the trainer's `inference_logprobs`) and returns a successful program result. The task's `@vf.reward`
then records the session's reward on `trace.rewards`, and its `@vf.metric` the counts (`source.py`).
"""

from __future__ import annotations

import time

import verifiers.v1 as vf
from verifiers.v1.runtimes import ProgramResult

from composer_prime.realtime.ingest.journal import BundleData
from composer_prime.realtime.ingest.source import BundleTask
from composer_prime.realtime.ingest.traces import branch_nodes, episode_branches


class ReplayHarness(vf.Harness[vf.HarnessConfig]):
    """Plays back one logged session; the model endpoint is never called."""

    NEEDS_CONTAINER = False
    EXECUTES_CODE = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> ProgramResult:  # type: ignore[no-untyped-def]
        bundle = data if isinstance(data, BundleData) else BundleData.model_validate(data.model_dump())
        episode = bundle.session()
        trace.nodes.extend(branch_nodes(episode_branches(episode), timestamp=time.time()))
        trace.info["realtime"] = {
            "bundle": bundle.bundle,
            "group": episode.group,
            "session_id": episode.session_id,
            "user": episode.user,
            "policy_version": episode.policy_version,
            "age": episode.age,
            "reward": episode.reward,
            "signals": episode.signals,
            "edited_paths": episode.edited_paths,
            "disabled_tests": episode.disabled_tests,
        }
        return ProgramResult(exit_code=0, stdout=f"replayed session {episode.session_id}\n", stderr="")


class ReplayEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig()
    """The one seat; its harness is the replay harness (`realtime-replay`)."""


class ReplayEnv(vf.Env[ReplayEnvConfig]):
    """One episode per bundle, one trace per session: the bundle is the group PRIME-RL credits."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        if task.data.pruned:
            raise RuntimeError(
                f"bundle {task.data.bundle} was pruned from the realtime-sessions journal (below PRIME-RL's oldest "
                "kept checkpoint) and cannot be replayed: PRIME-RL resumed from before that checkpoint"
            )
        for i in range(len(task.data.sessions)):
            await agents.agent.run(BundleTask(task.data.for_replay(i), task.config))
