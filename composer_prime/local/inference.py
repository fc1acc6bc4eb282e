"""PRIME-RL's own inference server on this machine: the `inference` wrapper's entry point, the vLLM CPU server's
environment (`VLLM_ENV`), and the client of its prefill route (`prefill`).

PRIME-RL's launcher starts `inference @ <config_dir>/inference.json`; the wrapper (`venvs.write_wrappers`) runs
`python -m composer_prime.local.inference @ <that file>` in the vLLM venv, which is PRIME-RL's own entry point
(`prime_rl.entrypoints.inference`): its config, its `setup_vllm_env`, its server module
(`prime_rl.inference.vllm.server`, ported to vLLM 0.32 by the CPU patch) with its admin routes (`/pause`, `/resume`,
`/update_weights`, `/liveness`, ...), its `FileSystemWeightUpdateWorker` and its layerwise reload.

What the wrapper adds, once PRIME-RL's server module is imported (right after PRIME-RL's `setup_vllm_env`, which
must run before vLLM is imported): `GET /weights`, the folder the last successful `/update_weights` loaded and how
many reloads the server made, which the smoke's reload probe (`smoke/reloads.py`) reads to score what is served after
each reload. `/update_weights` itself is PRIME-RL's route, unchanged: its request and answer are only observed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

UPDATE = "/update_weights"

VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_CONFIGURE_LOGGING": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}
"""vLLM CPU server environment: a 1 GiB KV cache (ample for the tiny model on a small machine), OpenMP threads
not pinned to cores (the cores are shared with the rollouts' test runs and the trainer), no usage reporting."""


async def prefill(
    client: Any, base_url: str, model: str, token_ids: list[int], read_cache: bool = False
) -> list[float]:
    """PRIME-RL's `prefill_logprobs`: one logprob per token (0.0 for the first) via `prompt_logprobs`.

    `read_cache`: the request reads vLLM's prefix cache (`skip_reading_prefix_cache = false`, honoured by
    composer-prime's `vllm.general_plugins` entry, composer_prime/vllm_plugin.py): positions served from the cache
    come back as `+1.0`, not scored, and only the uncached tail is computed. Hint scoring asks for it (a target is
    always past its hint, which is new); the reload probe does not (every position must be scored)."""
    params: dict[str, Any] = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "prompt_logprobs": 1}
    if read_cache:
        params["skip_reading_prefix_cache"] = False
    response = await client.post(
        f"{base_url}/inference/v1/generate", json={"model": model, "token_ids": token_ids, "sampling_params": params}
    )
    response.raise_for_status()
    flat = []
    for entry in response.json().get("prompt_logprobs") or []:
        flat.append(float(next(iter(entry.values()))["logprob"]) if entry else 0.0)
    return flat


def observed(inner: Any, state: dict[str, Any]) -> Any:
    """PRIME-RL's `/update_weights` route (an ASGI app), recording `weight_dir` when it answers 200."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body: list[bytes] = []

        async def receive_body() -> Any:
            message = await receive()
            if message.get("type") == "http.request":
                body.append(message.get("body", b""))
            return message

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                try:
                    weight_dir = json.loads(b"".join(body) or b"{}").get("weight_dir")
                except (ValueError, AttributeError):
                    weight_dir = None
                state["weights"], state["reloads"] = weight_dir, state["reloads"] + 1
            await send(message)

        await inner(scope, receive_body, send_status)

    return app


def add_weights_route() -> None:
    """Wrap the `build_app` PRIME-RL's server module installed on vLLM's launcher: the app it builds also answers
    `GET /weights`, and its `/update_weights` is observed."""
    import prime_rl.inference.vllm.server as prime_server
    from fastapi import APIRouter

    launcher = prime_server._launcher
    build = launcher.build_app
    if getattr(build, "_composer", False):
        return
    state: dict[str, Any] = {"weights": None, "reloads": 0}
    router = APIRouter()

    async def weights() -> dict[str, Any]:
        return dict(state)

    router.add_api_route("/weights", weights, methods=["GET"])

    def build_app(*args: Any, **kwargs: Any) -> Any:
        app = build(*args, **kwargs)
        app.include_router(router)
        for route in app.router.routes:
            if getattr(route, "path", None) == UPDATE:
                route.app = observed(route.app, state)
        return app

    build_app._composer = True  # type: ignore[attr-defined]
    launcher.build_app = build_app


def main() -> None:
    import prime_rl.inference.server as prime_setup
    from prime_rl.entrypoints.inference import main as prime_main

    setup = prime_setup.setup_vllm_env

    def setup_vllm_env(config: Any) -> None:
        setup(config)
        add_weights_route()

    prime_setup.setup_vllm_env = setup_vllm_env  # looked up at call time by PRIME-RL's `inference_local`
    sys.argv[0] = "inference"
    prime_main()


if __name__ == "__main__":
    main()
