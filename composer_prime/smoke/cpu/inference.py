"""PRIME-RL's own inference server, as the smoke's `inference` wrapper runs it, plus one read-only route.

PRIME-RL's launcher starts `inference @ <config_dir>/inference.json`; the wrapper runs
`python -m composer_prime.smoke.cpu.inference @ <that file>` in the vLLM venv, which is PRIME-RL's own entry point
(`prime_rl.entrypoints.inference`): its config, its `setup_vllm_env`, its server module
(`prime_rl.inference.vllm.server`, ported to vLLM 0.32 by the CPU patch) with its admin routes (`/pause`, `/resume`,
`/update_weights`, `/liveness`, ...), its `FileSystemWeightUpdateWorker` and its layerwise reload.

What the smoke adds, once PRIME-RL's server module is imported (right after PRIME-RL's `setup_vllm_env`, which must
run before vLLM is imported): `GET /weights`, the folder the last successful `/update_weights` loaded and how many
reloads the server made, which the reload probe (`smoke/reloads.py`) reads to score what is served after each
reload. `/update_weights` itself is PRIME-RL's route, unchanged: its request and answer are only observed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

UPDATE = "/update_weights"


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
