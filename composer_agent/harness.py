"""`ComposerAgentHarness`: the verifiers v1 harness that runs the composer agent loop in-process.

verifiers lets a harness run its loop in the worker instead of launching a program, as long as every model call goes
through the interception `endpoint` + `secret` (`Harness.launch`'s contract); the trace is then the record of what
ran. Nothing is installed at setup, so the harness works offline on the subprocess runtime, and its tools reach the
task's files only through the runtime, so it works the same in docker and prime boxes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.clients import ModelContext
from verifiers.v1.configs.client import resolve_api_key
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult, Runtime
from verifiers.v1.task import TaskData

from composer_agent.config import ComposerAgentConfig
from composer_agent.loop import AgentLoop
from composer_agent.model import ModelClient, discover_window, host_endpoint
from composer_agent.stats import INFO_KEY, AgentStats, metrics_from_info
from composer_agent.tools import Toolbox
from composer_agent.workspace import Workspace

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are a coding agent working in a repository. Your tools run in the task's work directory; all \
paths are relative to it.

Tools:
- bash: run a shell command (non-interactive; long output is shortened in the middle; commands have a timeout).
- view: show a file with line numbers (optionally a line range), or list a directory.
- str_replace: replace a string that occurs exactly once in a file.
- create: create or overwrite a file.
- search: find lines matching an extended regular expression in the files under a path.
- finish: end the task. Call it once the work is done and checked.

Work in small verified steps: look at the code, make a change, run it or its tests, and fix what fails."""


TRACE_STOPS = {"compaction_failed": "compaction_failed", "context_overflow": "context_length", "max_turns": "max_turns"}
"""Loop ends that verifiers and PRIME-RL must see as truncations, as the `trace.stop_condition` they know:
`compaction_failed` and `max_turns` are in `Trace.is_truncated`; `context_length` is the condition verifiers' own
interception sets when a prompt outgrows the window."""


class ComposerAgentHarness(vf.Harness[ComposerAgentConfig]):
    APPENDS_SYSTEM_PROMPT = True
    NEEDS_CONTAINER = False
    EXECUTES_CODE = True

    async def launch(
        self,
        ctx: ModelContext,
        trace: vf.Trace,
        runtime: Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: TaskData,
    ) -> ProgramResult:
        head, task = self.initial_messages(data)
        stats = AgentStats()
        model = ModelClient(
            host_endpoint(endpoint, runtime),  # the loop runs on the host, not where `endpoint` is reachable
            secret,
            ctx.model,
            timeout_s=self.config.request_timeout_s,
            max_retries=self.config.max_retries,
        )
        workspace = Workspace(
            runtime,
            self.config.resolved_env,
            output_cap_bytes=max(1000, self.config.tool_output_max_chars - 200),
            op_timeout_s=self.config.file_tool_timeout_s,
        )
        try:
            await workspace.probe()
            if workspace.missing:
                logger.warning(
                    "composer-agent: the runtime lacks %s; tools that use them will fail", ", ".join(workspace.missing)
                )
            window = await self._window(ctx, model)
            loop = AgentLoop(
                model, Toolbox(workspace, self.config), self.config, stats, lambda: trace.stop_condition, trace
            )
            reason = await loop.run(head, task, window)
            if reason in TRACE_STOPS:
                trace.stop(TRACE_STOPS[reason])
        finally:
            # Shielded: on an agent timeout this runs in a cancelled task, and the box's processes must still die.
            stats.reaped_processes = await asyncio.shield(workspace.reap())
            await model.close()
            stats.client_seconds = model.client_seconds
            trace.info[INFO_KEY] = stats.to_info()
            trace.record_metrics(metrics_from_info(trace.info[INFO_KEY]))
        return ProgramResult(exit_code=0, stdout=f"composer-agent finished: {reason}\n", stderr="")

    @vf.metric
    async def composer_agent(self, trace: vf.Trace) -> dict[str, float]:
        """The loop's metrics, from the stats it saved on the trace (so replayed traces get them too)."""
        info = trace.info.get(INFO_KEY)
        return metrics_from_info(info) if isinstance(info, dict) else {}

    def initial_messages(self, data: TaskData) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(system messages, task messages): the harness prompt plus the task's system prompt, then its prompt."""
        system, prompt = self.resolve_prompt(data)
        if prompt is None:
            raise ValueError(
                f"task {data.name or data.idx!r} has no prompt; composer-agent needs TaskData.prompt (a string or "
                "messages) to tell the model what to do"
            )
        base = self.config.system_prompt if self.config.system_prompt is not None else SYSTEM_PROMPT
        system_text = "\n\n".join(p for p in (base, system) if p)
        head: list[dict[str, Any]] = [{"role": "system", "content": system_text}] if system_text else []
        if isinstance(prompt, str):
            return head, [{"role": "user", "content": prompt}]
        wire = [message_to_wire(m) for m in prompt]
        head += [m for m in wire if m.get("role") == "system"]
        return head, [m for m in wire if m.get("role") != "system"]

    async def _window(self, ctx: ModelContext, model: ModelClient) -> int | None:
        if not self.config.compaction.enabled:
            return None
        candidates = [(model.endpoint, {"Authorization": f"Bearer {model.secret}"})]
        client = ctx.client
        base_url = getattr(client, "base_url", None)
        if base_url:
            headers = dict(getattr(client, "headers", {}) or {})
            try:
                headers.setdefault("Authorization", f"Bearer {resolve_api_key(client)}")
            except Exception as e:  # noqa: BLE001 - a key we cannot resolve only costs us the window
                logger.debug("no API key for %s: %s", base_url, e)
            candidates.append((base_url, headers))
        return await discover_window(candidates, ctx.model)
