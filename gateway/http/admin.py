"""Admin JSON API (admin key only). Grows with persistence and probes."""

from __future__ import annotations

from dataclasses import asdict

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.errors import GatewayError
from gateway.http.errors import error_response
from gateway.state import AppState


def _guard(request: Request) -> Response | None:
    state: AppState = request.state.gw
    try:
        state.auth.authenticate_admin(request.headers.get("authorization"))
    except GatewayError as exc:
        return error_response(exc, {"x-request-id": request.scope["gateway.request_id"]})
    return None


async def list_endpoints(request: Request) -> Response:
    if (denied := _guard(request)) is not None:
        return denied
    state: AppState = request.state.gw
    now = state.clock()
    breakers = state.breaker.snapshot(now)
    data = []
    for ep in state.catalog.endpoints:
        totals = state.accountant.totals.get(ep.id)
        data.append(
            {
                "id": ep.id,
                "model": ep.model,
                "provider": ep.provider,
                "kind": ep.kind,
                "region": ep.region,
                "keeps_prompts": ep.keeps_prompts,
                "ready": ep.is_ready(),
                "breaker": breakers.get(ep.id, {"state": "closed"}),
                "totals": asdict(totals) if totals else None,
                "price": ep.deployment.price.model_dump(),
                "context_window": ep.deployment.context_window,
                "capabilities": ep.deployment.capabilities.model_dump(mode="json"),
            }
        )
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


routes = [Route("/admin/api/endpoints", list_endpoints, methods=["GET"])]
