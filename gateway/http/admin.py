"""Admin JSON API (admin key only). Grows with persistence and probes."""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import admin_sessions
from gateway.state import AppState
from kernel.errors import AuthenticationFailed, PermissionDenied, RateLimited


def check_admin_key(request: Request, authorization: str | None) -> None:
    """The admin key check behind every admin route and the dashboard's sign-in, limited per
    client address: past `auth.admin_failures_per_minute` failures the key is not even checked."""
    state: AppState = request.state.gw
    address = request.client.host if request.client else ""
    now = state.clock()
    if (wait := state.admin_failures.retry_in(address, now)) is not None:
        raise RateLimited(
            "Too many failed admin authentications from this address; try again later.",
            headers={"retry-after": str(max(1, math.ceil(wait)))},
        )
    try:
        state.auth.authenticate_admin(authorization)
    except (AuthenticationFailed, PermissionDenied):
        if state.auth.admin_enabled and authorization is not None:  # a key was tried, and it was wrong
            state.admin_failures.failed(address, now)
        raise


def _guard(request: Request) -> None:
    """The admin key or a dashboard session, else a `GatewayError` (the app's handler answers it)."""
    state: AppState = request.state.gw
    authorization = request.headers.get("authorization")
    cookie = request.cookies.get(admin_sessions.COOKIE)
    if authorization is None and cookie is not None and state.auth.admin_enabled:  # the dashboard's session
        csrf = request.headers.get(admin_sessions.CSRF_HEADER)
        admin_sessions.admit(state.sessions, cookie, request.method, csrf, state.clock())
    else:
        check_admin_key(request, authorization)


class NoStoreMiddleware:
    """``cache-control: no-store`` on every /admin response that does not set its own: admin JSON
    (keys' spend, endpoint state) must not sit in a browser's or a proxy's cache."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/admin"):
            await self.app(scope, receive, send)
            return

        async def send_no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                if not any(name.lower() == b"cache-control" for name, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
            await send(message)

        await self.app(scope, receive, send_no_store)


async def list_endpoints(request: Request) -> Response:
    _guard(request)
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


def _load(supervisor: Any, index: int) -> dict[str, Any] | None:
    load = supervisor.load(index) if hasattr(supervisor, "load") else None
    if load is None:
        return None
    return {"processing": load.processing, "deferred": load.deferred, "slots": load.slots, "kv_usage": round(load.kv_usage, 4)}


async def list_engines(request: Request) -> Response:
    _guard(request)
    state: AppState = request.state.gw
    now = time.monotonic()  # the supervisors' clock
    data = []
    for cfg, supervisor in zip(state.settings.engines, state.engines):
        replicas = [
            {
                "index": r.index,
                "state": r.state,
                "pid": r.pid,
                "port": r.port,
                "base_url": r.base_url,
                "model": r.model,
                "uptime_s": round(now - r.started_at, 1) if r.started_at is not None and r.state == "ready" else None,
                "restarts": r.restarts,
                # The engine's own report (llama-server's /metrics, /slots), where it gives one.
                "load": _load(supervisor, r.index),
            }
            for r in supervisor.replicas
        ]
        data.append({"name": cfg.name, "kind": cfg.kind, "model": cfg.model, "replicas": replicas})
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


routes = [
    Route("/admin/api/endpoints", list_endpoints, methods=["GET"]),
    Route("/admin/api/engines", list_engines, methods=["GET"]),
]
