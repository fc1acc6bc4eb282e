"""Configuration of the composer-agent harness (`[env.agent.harness] id = "composer-agent"`)."""

from __future__ import annotations

import os

from pydantic import Field, field_validator, model_validator
from pydantic_config import BaseConfig
from verifiers.v1.configs.harness import HarnessConfig

TOOL_NAMES: tuple[str, ...] = ("bash", "view", "str_replace", "create", "search", "finish")
"""The tools' names, in the order the model is shown them (`tools.ARGS` holds one argument model per name)."""


class CompactionConfig(BaseConfig):
    """Self-summarization: when the context crosses a threshold the model summarises its progress and the loop
    continues from a fresh context of system prompt, task and summary (a new branch of the trace)."""

    enabled: bool = True
    """Compact when the context crosses the threshold. Off: the rollout runs until a limit or the model's window."""

    summarize_at_tokens: int | None = Field(None, ge=256)
    """Context size (prompt + completion tokens of the last turn, plus an estimate of the tool output appended since)
    at which the model is asked to summarise. None derives it from the model's window as reported by `GET /v1/models`
    (`max_model_len` or `context_length`): `max(window - reserve_tokens, window // 2)`; with no window reported and no
    value set, compaction stays off for that rollout (recorded in `trace.info["composer_agent"]["threshold"]`)."""

    reserve_tokens: int = Field(16384, ge=0)
    """Room kept below the model's window when the threshold is derived from it: the summary request (the whole context
    plus the summary prompt) and the summary itself must fit there."""

    summary_max_tokens: int = Field(4096, ge=64)
    """Bound on the summary: sent as the summary call's `max_tokens`, lowered to what the model's window leaves after
    the summary request (the eval's sampling config wins when it sets `max_tokens`); a longer summary is
    middle-truncated to about this many tokens in the next context."""

    summary_attempts: int = Field(3, ge=1, le=10)
    """Summary calls per compaction before giving up; an empty summary is resampled. When all attempts are empty the
    rollout ends cleanly (finish reason `compaction_failed`)."""

    max_compactions: int = Field(8, ge=0)
    """Compactions per rollout. Past the cap the loop continues on its full context until a limit stops it."""

    @model_validator(mode="after")
    def _process_switch(self) -> CompactionConfig:
        """`COMPACTION_ENV=off` in the process's environment turns compaction off whatever the config says."""
        value = os.environ.get(COMPACTION_ENV, "").strip().lower()
        if value not in ("", "on", "off"):
            raise ValueError(
                f"{COMPACTION_ENV}={os.environ[COMPACTION_ENV]!r} is not a compaction switch: set it to 'off' (no "
                "self-summarization in any composer-agent rollout of this process) or 'on' / leave it unset (each "
                "harness's own `compaction.enabled`)"
            )
        if value == "off":
            self.enabled = False
        return self


COMPACTION_ENV = "COMPOSER_AGENT_COMPACTION"
"""Process-wide compaction switch for ablations: `off` turns compaction off in every composer-agent harness of the
process (train and eval sources alike); `on` or unset leaves each harness's `compaction.enabled`. A launch overlay
sets it under `[orchestrator.env_vars]`, which PRIME-RL's launcher passes to the env servers: one key, where
`compaction.enabled` lives inside `[[orchestrator.train.source]]` and an overlay would have to restate every source
(PRIME-RL's config merge replaces arrays of tables). `recipes/no-compaction.toml` is that overlay."""


class ComposerAgentConfig(HarnessConfig):
    """The composer-agent harness: an in-process coding-agent loop with self-summarization compaction."""

    id: str = "composer-agent"
    """Harness id. `composer-agent` resolves to the top-level module `composer_agent`; a taskset that exports this
    harness as its default (feature-deletion, swe-gym) resolves it under the taskset's own id."""

    max_turns: int = Field(200, ge=1)
    """Agent turns (model calls that may use tools; summary calls are not counted) before the loop ends with finish
    reason `max_turns`. verifiers' own `AgentConfig.max_turns` and token limits apply on top."""

    system_prompt: str | None = None
    """Replaces the harness's built-in system prompt (which describes the tools). The task's own system prompt is
    appended after it either way."""

    bash_timeout_s: int = Field(180, ge=1)
    """Default timeout of a `bash` call when the model gives none. On timeout the command's whole process group is
    killed and the model is told."""

    max_bash_timeout_s: int = Field(1800, ge=1)
    """Upper bound on a model-requested `bash` timeout; larger requests are clamped (and the model is told)."""

    file_tool_timeout_s: float = Field(60.0, gt=0)
    """Timeout of one `view`, `str_replace`, `create` or `search` call in the runtime."""

    tool_output_max_chars: int = Field(20000, ge=1000)
    """Cap on one tool result entering the context; longer output keeps its head and tail (middle truncation)."""

    max_file_bytes: int = Field(2_000_000, ge=1024)
    """Largest file `str_replace` reads and rewrites."""

    search_max_matches: int = Field(200, ge=1)
    """Matching lines `search` returns before it says the list was cut."""

    request_timeout_s: float = Field(1800.0, gt=0)
    """Timeout of one model call through the interception endpoint (long generations are slow)."""

    max_retries: int = Field(2, ge=0, le=10)
    """Transport-level retries of a model call (connection errors, 5xx). The interception serves a marked retry the
    recorded response, so a retry never forks the trace."""

    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    """Self-summarization settings."""

    @field_validator("disabled_tools")
    @classmethod
    def _check_disabled_tools(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if name == "finish":
                raise ValueError("disabled_tools cannot contain 'finish': the loop needs it to end; remove it")
            if name not in TOOL_NAMES:
                raise ValueError(
                    f"disabled_tools names an unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"
                )
        return value

    @model_validator(mode="after")
    def _check_timeouts(self) -> ComposerAgentConfig:
        if self.bash_timeout_s > self.max_bash_timeout_s:
            raise ValueError(
                f"bash_timeout_s = {self.bash_timeout_s} exceeds max_bash_timeout_s = {self.max_bash_timeout_s}; "
                "raise max_bash_timeout_s or lower bash_timeout_s"
            )
        return self
