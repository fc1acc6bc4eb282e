"""composer-agent: a coding-agent harness for verifiers v1 with self-summarization compaction.

Use it as an agent's harness with `{"id": "composer-agent"}` (TOML: `[env.agent.harness] id = "composer-agent"`).
The loop runs in-process and reaches the model only through the rollout's interception endpoint; its tools (bash,
view, str_replace, create, search, finish) run in the task's work directory through the runtime. See
docs/composer-agent.md.

May import: `composer_prime.text`, `composer_prime.process` (the reaper and the PID namespace of the box).
"""

from composer_agent.config import ComposerAgentConfig
from composer_agent.harness import ComposerAgentHarness

__all__ = ["ComposerAgentConfig", "ComposerAgentHarness"]
