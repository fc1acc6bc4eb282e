"""One real verifiers rollout of a task by composer-agent on the subprocess runtime, driven by a scripted model."""

from __future__ import annotations

import asyncio

import verifiers.v1 as vf

from tests.support.agent_tasks import scripted_agent
from tests.support.scripted_server import Reply, ScriptedModelServer


def scripted_rollout(task: vf.Task, script: list[Reply], timeout_s: float = 180) -> tuple:
    """Run `task` with the scripted model; returns the trace and the requests the model server received."""
    with ScriptedModelServer(script) as server:
        agent = scripted_agent(server.base_url, server.model)
        trace = asyncio.run(asyncio.wait_for(agent.run(task), timeout_s))
        return trace, server.requests
