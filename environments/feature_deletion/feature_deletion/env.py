"""The single-agent env of feature-deletion, whose agent runs composer-agent unless configured otherwise.

A taskset names its default harness through the env it exports: the `agent` role's declared default is what an
unpinned `[env.agent]` resolves to. `[env.agent.harness] id = "..."` still picks any other harness.
"""

import verifiers.v1 as vf


class FeatureDeletionEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "composer-agent"})
    """The one seat; its harness defaults to composer-agent."""


class FeatureDeletionEnv(vf.SingleAgentEnv, vf.Env[FeatureDeletionEnvConfig]):
    """`SingleAgentEnv` with composer-agent as the default harness."""
