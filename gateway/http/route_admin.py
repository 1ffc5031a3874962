"""Admin API for routing (admin key only): explain a request against the live state.

    POST /admin/api/route/explain  {"body": {...request...}, "op": "chat", "key": "team-a"}

Runs the same features, filters and policy as a real request, on the live snapshot (breakers,
load, latency statistics, affinity index), without dispatching or counting anything.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.admin import check_admin_key
from gateway.pipeline.explain import OPS, explain_with
from gateway.state import AppState
from kernel.errors import InvalidRequest


async def explain_route(request: Request) -> Response:
    state: AppState = request.state.gw
    check_admin_key(request, request.headers.get("authorization"))
    try:
        payload = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise InvalidRequest("The body must be JSON: {\"body\": {...}, \"op\": \"chat\", \"key\": null}.") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("body"), dict):
        raise InvalidRequest("Expected {\"body\": {...request...}, \"op\": \"chat\", \"key\": null}.", param="body")
    op = payload.get("op") or "chat"
    if op not in OPS:
        raise InvalidRequest(f"Unknown op {op!r}; expected one of {', '.join(OPS)}.", param="op")
    assert state.router is not None
    doc, text = await explain_with(state.router, op, payload["body"], payload.get("key"))
    doc["table"] = text
    return Response(orjson.dumps(doc), media_type="application/json")


routes = [Route("/admin/api/route/explain", explain_route, methods=["POST"])]
