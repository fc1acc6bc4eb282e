"""Rule-based teacher endpoints: local stand-ins for the frozen teacher models of trace replay.

The teacher hook (`composer_prime.teachers`) asks any OpenAI-compatible chat endpoint for a verdict on one step
(`{"score": s, "hint": h}`, docs/teachers.md). A smoke run has no teacher model, so two small rule sets answer in
that format from what the request shows (the step's tool calls and what the tools answered), over real HTTP on
127.0.0.1, with `usage` so the hook's cost accounting runs:

- `checker`: a tool error or a failed command scores -1 with a hint to fix it; writing a file scores +0.5 with a
  hint to run the tests; `finish` scores +0.5; anything else 0.
- `skeptic`: `finish` without a test run in view scores -0.5 with a hint to run the tests first; a tool error
  scores -1; a write scores +0.25; anything else 0.

They disagree on purpose (on `finish`), so the algorithm's agreement rule has work to do. `composer-prime smoke
--teacher-url URL --teacher-model NAME` replaces them with a real endpoint.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import web

RULES = ("checker", "skeptic")

FIX_HINT = "The tool call failed: read the error and retry with corrected arguments before moving on."
TEST_HINT = "After writing the file, run `python -m pytest -q` to check that the feature works."
FINISH_HINT = "Run the tests before calling finish, so the result is checked."


def verdict(rule: str, text: str) -> dict[str, Any]:
    """The rule's verdict on a teacher request's user message."""
    step, _, answered = text.partition("# What the tools answered")
    step = step.rpartition("# The step to judge")[2]
    failed = "Error" in answered or "Traceback" in answered or "[exit code 1]" in answered
    wrote = "[tool call] create(" in step or "[tool call] str_replace(" in step
    finished = "[tool call] finish(" in step
    trajectory = text.partition("# Trajectory before the step")[2]
    tested = "pytest" in trajectory.partition("# The step to judge")[0]
    if failed:
        return {"score": -1.0, "hint": FIX_HINT}
    if rule == "checker":
        if wrote:
            return {"score": 0.5, "hint": TEST_HINT}
        return {"score": 0.5 if finished else 0.0, "hint": None}
    if finished and not tested:
        return {"score": -0.5, "hint": FINISH_HINT}
    return {"score": 0.25 if wrote else 0.0, "hint": None}


class Referees:
    """One aiohttp app serving every rule at `/<rule>/v1/chat/completions`; counts the requests it answered."""

    def __init__(self) -> None:
        self.requests = 0
        self.app = web.Application()
        self.app.add_routes([web.post("/{rule}/v1/chat/completions", self.chat)])
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def chat(self, request: web.Request) -> web.Response:
        rule = request.match_info["rule"]
        if rule not in RULES:
            raise web.HTTPNotFound(reason=f"no rule {rule!r}; the rules are {', '.join(RULES)}")
        body = await request.json()
        messages = body.get("messages") or []
        text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        answer = json.dumps(verdict(rule, text))
        self.requests += 1
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        return web.json_response(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or rule,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": prompt_chars // 4,
                    "completion_tokens": len(answer) // 4,
                    "total_tokens": prompt_chars // 4 + len(answer) // 4,
                },
            }
        )

    async def start(self, port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{bound}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def teachers(self) -> list[dict[str, Any]]:
        """The teacher table entries for the hook (nominal prices, so the cost figures are exercised)."""
        return [
            {
                "name": rule,
                "base_url": f"{self.base_url}/{rule}/v1",
                "model": f"rule-{rule}",
                "input_usd_per_mtok": 0.40,
                "output_usd_per_mtok": 1.60,
                "timeout_s": 30.0,
            }
            for rule in RULES
        ]


def serve(port: int) -> None:
    """Serve the rules on 127.0.0.1:`port` until SIGTERM (the smoke runs this as a process of its own)."""
    web.run_app(Referees().app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m composer_prime.smoke.referees", description=serve.__doc__)
    parser.add_argument("--port", type=int, required=True)
    serve(parser.parse_args().port)
