"""The admin proxy's allow-list: the routes PRIME-RL's orchestrator calls on an inference server, and no other.

A token holder must not load weights nobody signed, so the proxy forwards a request only when its method and path
are on `ROUTES`, and every route that loads weights names the body field holding a broadcast step dir: the proxy
builds that step from signed versions and forwards the local copy instead (`proxy.py`). Everything else is refused
with a 403 naming the route; nothing of it reaches vLLM.

Paths are matched as vLLM's router would read them, after normalising: empty segments collapse (`//update_weights`)
and a trailing `/` goes (`/update_weights/`, which Starlette would redirect to `/update_weights`), so both reach the
verifying handler. What is forwarded is always the canonical route, never the caller's spelling, and redirects are
not followed. A spelling that differs from a route only by case (`/UPDATE_WEIGHTS`) and a path with a `.` or `..`
segment are refused, not guessed at.

The routes are those of PRIME-RL 559b447 (`prime_rl/utils/client.py`, `inference/vllm/server.py`): `GET /health`,
`/v1/models`, `/metrics`, `/liveness`; `POST /pause`, `/resume`, `/update_weights`, `/load_lora_adapter` (its
wrapper of vLLM's runtime LoRA loader) and vLLM's own `/v1/load_lora_adapter`, `/v1/unload_lora_adapter`.
`POST /init_broadcaster` is refused: it opens an NCCL broadcast, a weight channel no signature covers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    methods: frozenset[str]
    loads: str | None = None
    """The JSON field naming a broadcast step dir, for routes that load weights: rewritten to the verified copy."""
    fields: frozenset[str] = frozenset()
    """The body fields forwarded with `loads` (a weight-loading body with any other field is refused)."""


_GET = frozenset({"GET", "HEAD"})
_POST = frozenset({"POST"})
_LORA = Route(_POST, "lora_path", frozenset({"lora_name", "load_inplace"}))
ROUTES: dict[str, Route] = {
    "/health": Route(_GET),
    "/liveness": Route(_GET),
    "/metrics": Route(_GET),
    "/v1/models": Route(_GET),
    "/pause": Route(_POST),
    "/resume": Route(_POST),
    "/update_weights": Route(_POST, "weight_dir"),
    "/load_lora_adapter": _LORA,
    "/v1/load_lora_adapter": _LORA,
    "/v1/unload_lora_adapter": Route(_POST),
}
REFUSED = {
    "/init_broadcaster": "it opens an NCCL weight broadcast, which no signature covers; the relay carries PRIME-RL's "
    'filesystem broadcast only ([weight_broadcast] type = "filesystem")',
}
_BY_LOWER = {route.lower(): route for route in [*ROUTES, *REFUSED]}


class Forbidden(Exception):
    """A request the proxy refuses (403); the message names the route."""


def canonical(method: str, path: str) -> tuple[str, Route]:
    """The listed route a request's (decoded) path names, and its entry; Forbidden naming the route otherwise."""
    segments = [s for s in path.split("/") if s]
    shown = f"{method} {path}"
    if any(s in (".", "..") for s in segments):
        raise Forbidden(f"{shown}: a path with '.' or '..' segments is not an admin route; send the route itself")
    route = "/" + "/".join(segments)
    if route in REFUSED:
        raise Forbidden(f"{shown} is refused: {REFUSED[route]}")
    entry = ROUTES.get(route)
    if entry is None:
        spelled = _BY_LOWER.get(route.lower())
        if spelled is not None:
            raise Forbidden(f"{shown} is not an admin route (routes are case-sensitive); the route is {spelled}")
        raise Forbidden(f"{shown} is not an admin route the relay serves; it allows {allowed()}")
    if method not in entry.methods:
        raise Forbidden(f"{shown}: {route} takes {' or '.join(sorted(entry.methods))}, not {method}")
    return route, entry


def allowed() -> str:
    return ", ".join(f"{sorted(r.methods)[0]} {path}" for path, r in ROUTES.items())
