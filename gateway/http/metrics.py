"""Prometheus exposition at ``/metrics`` (the app's own registry)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.admin import check_admin_key
from gateway.state import AppState
from kernel.errors import NotFound

# What `generate_latest` writes (our metric and label names are all legacy-valid).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def metrics(request: Request) -> Response:
    state: AppState = request.state.gw
    if state.metrics is None:
        raise NotFound("Metrics are disabled (metrics.enabled).")
    if state.settings.metrics.require_auth:
        check_admin_key(request, request.headers.get("authorization"))
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


routes = [Route("/metrics", metrics, methods=["GET"])]
