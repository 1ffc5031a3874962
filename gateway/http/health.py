"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.state import AppState


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def readyz(request: Request) -> Response:
    """Ready when every model has at least one endpoint that can take traffic."""
    state: AppState = request.state.gw
    not_ready = [ep.id for ep in state.catalog.endpoints if not ep.is_ready()]
    models_down = [m for m in state.catalog.models() if all(not ep.is_ready() for ep in state.catalog.candidates(m))]
    ok = bool(state.catalog.endpoints) and not models_down
    # Keys only the database can vouch for get 503 now: let the balancer prefer a replica that can.
    ok = ok and state.auth.store_usable
    body: dict[str, Any] = {
        "status": "ready" if ok else "not_ready",
        "endpoints": len(state.catalog.endpoints),
        "endpoints_not_ready": not_ready,
        "models_without_endpoint": models_down,
    }
    if not state.catalog.endpoints:
        body["reason"] = "no endpoint is configured"
    body["auth"] = auth = state.auth.status()
    if "reason" in auth:
        body.setdefault("reason", f"key store unavailable: {auth['reason']}")
    if state.shared is not None:
        # A store outage does not make the gateway unready: it serves on local state, and says so.
        body["state_store"] = state.shared.status()
    if state.limits is not None:
        body["limits"] = state.limits.status()
        if not state.limits.ready:  # fail-closed while the limit store is away
            ok = False
            body["status"] = "not_ready"
            body.setdefault("reason", f"limits store unavailable (fail-closed): {body['limits']['reason']}")
    # A background loop that has not completed a round within its limit is stuck (or dying on a bug).
    stuck = state.loops.stale()
    if stuck:
        ok = False
        body["status"] = "not_ready"
        body["background_stale"] = stuck
    if state.drain.active:  # told to stop: the balancer must move away before the listener closes
        ok = False
        body["status"] = "draining"
        body["reason"] = "shutting down"
    return Response(orjson.dumps(body), status_code=200 if ok else 503, media_type="application/json")


routes = [
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
]
