"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, standing in for a model in tests.

No weights are reachable on CI machines, so rollouts are driven by a script: each `POST /v1/chat/completions`
is answered by the next `Reply` (or by a callable that sees the request). It speaks the parts of the API that
verifiers' clients use: tool calls with `finish_reason: "tool_calls"`, `usage`, SSE streaming with
`stream_options.include_usage`, and `GET /v1/models` with a `max_model_len` card.

The server listens on 127.0.0.1 only, on a free port, in a daemon thread, and shuts itself down after
`lifetime_s` even if a test forgets to stop it.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY_VAR = "SCRIPTED_MODEL_API_KEY"
"""The environment variable agents read the scripted server's key from; tests/conftest.py sets it for the session."""


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")

    def wire(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int | None = None
    """Reported `usage.prompt_tokens`; None estimates it as characters / 4 of the request's messages."""
    completion_tokens: int | None = None
    status: int = 200
    """A non-200 status answers with an OpenAI-style error body instead."""


def tool(name: str, **arguments: Any) -> Reply:
    """A reply with one tool call."""
    return Reply(tool_calls=[ToolCall(name, arguments)])


Script = list[Reply] | Callable[[dict[str, Any]], Reply]


class ScriptedModelServer:
    def __init__(
        self,
        script: Script,
        *,
        model: str = "scripted-model",
        max_model_len: int | None = 32768,
        latency_s: float = 0.0,
        lifetime_s: float = 600.0,
    ):
        self.model = model
        self.max_model_len = max_model_len
        self.latency_s = latency_s
        self.lifetime_s = lifetime_s
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        """The headers of each chat-completions request, in the order of `requests`."""
        self._script = script
        self._cursor = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def next_reply(self, request: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.request_headers.append(headers or {})
            if callable(self._script):
                return self._script(request)
            if self._cursor >= len(self._script):
                return Reply(content="(script exhausted)")
            reply = self._script[self._cursor]
            self._cursor += 1
            return reply

    def start(self) -> ScriptedModelServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes; no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def _send_json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    card: dict[str, Any] = {"id": server.model, "object": "model", "owned_by": "scripted"}
                    if server.max_model_len is not None:
                        card["max_model_len"] = server.max_model_len
                    self._send_json(200, {"object": "list", "data": [card]})
                else:
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send_json(400, {"error": {"message": "body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                reply = server.next_reply(request, dict(self.headers.items()))
                if server.latency_s:
                    time.sleep(server.latency_s)
                if reply.status != 200:
                    self._send_json(reply.status, {"error": {"message": reply.content or "scripted error"}})
                    return
                body = server.completion(request, reply)
                if request.get("stream"):
                    self._stream(body, request)
                else:
                    self._send_json(200, body)

            def _stream(self, body: dict[str, Any], request: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                choice = body["choices"][0]
                message = choice["message"]
                base = {k: body[k] for k in ("id", "object", "created", "model")}
                base["object"] = "chat.completion.chunk"
                delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
                if message.get("tool_calls"):
                    delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(message["tool_calls"])]
                chunks = [
                    dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}]),
                    dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]),
                ]
                if (request.get("stream_options") or {}).get("include_usage"):
                    chunks.append(dict(base, choices=[], usage=body["usage"]))
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="scripted-model-server", daemon=True).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def completion(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [tc.wire() for tc in reply.tool_calls]
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = max(1, len(json.dumps(request.get("messages", []))) // 4)
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = max(1, len(json.dumps(message)) // 4)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
