"""The admin dashboard: static pages at ``/admin`` (no build step) that read only the admin JSON API,
and the sign-in session behind them.

    GET    /admin                     the page shell (hash routes pick the view)
    GET    /admin/ui/static/...       app.js, app.css, the vendored chart library
    POST   /admin/ui/session          {"key": admin key} -> HttpOnly SameSite=Strict cookie + CSRF token
    GET    /admin/ui/session          the current session's CSRF token (after a reload)
    DELETE /admin/ui/session          sign out (needs the CSRF token)

The session routes sit under a Mount so the admin API's route tests (which walk every ``/admin/``
Route) keep describing the JSON API only.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import admin_sessions
from gateway.http.admin import check_admin_key
from gateway.http.errors import error_response
from gateway.state import AppState
from kernel.errors import GatewayError, InvalidRequest, PayloadTooLarge

WEB_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "web"
COOKIE_PATH = "/admin"
SIGN_IN_MAX_BYTES = 4096

# No inline script or style anywhere: uPlot styles elements through the CSSOM, which CSP allows.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeadersMiddleware:
    """Adds the dashboard's security headers to every response it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _json(data: object, status: int = 200) -> Response:
    return Response(
        orjson.dumps(data),
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


def _error(request: Request, exc: GatewayError) -> Response:
    response = error_response(
        exc, {"x-request-id": request.scope.get("gateway.request_id", "")}
    )
    response.headers["cache-control"] = "no-store"
    return response


async def index(request: Request) -> Response:
    return FileResponse(
        WEB_DIR / "index.html",
        headers={**SECURITY_HEADERS, "cache-control": "no-store"},
    )


async def session(request: Request) -> Response:
    state: AppState = request.state.gw
    try:
        if request.method == "POST":
            return await _sign_in(request, state)
        cookie = request.cookies.get(admin_sessions.COOKIE)
        csrf = request.headers.get(admin_sessions.CSRF_HEADER)
        current = admin_sessions.admit(
            state.sessions, cookie, request.method, csrf, state.clock()
        )
    except GatewayError as exc:
        return _error(request, exc)
    if request.method == "DELETE":
        state.sessions.revoke(current.id)
        response = _json({"signed_out": True})
        response.delete_cookie(
            admin_sessions.COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=_behind_tls(request, state)
        )
        return response
    return _json(
        {
            "csrf_token": current.csrf,
            "expires_in": round(current.expires - state.clock()),
        }
    )


async def _sign_in(request: Request, state: AppState) -> Response:
    # JSON only: a cross-site HTML form cannot send it, so nobody can sign a victim in (login CSRF).
    if (
        request.headers.get("content-type", "").split(";")[0].strip().lower()
        != "application/json"
    ):
        raise InvalidRequest('Sign in with a JSON body: {"key": "<admin key>"}.')
    try:
        body = orjson.loads(await _small_body(request))
    except orjson.JSONDecodeError:
        raise InvalidRequest(
            'Sign in with a JSON body: {"key": "<admin key>"}.'
        ) from None
    key = body.get("key") if isinstance(body, dict) else None
    check_admin_key(request, f"Bearer {key}" if isinstance(key, str) and key.strip() else None)
    new = state.sessions.create(state.clock())
    response = _json({"csrf_token": new.csrf, "expires_in": round(state.sessions.ttl)})
    response.set_cookie(
        admin_sessions.COOKIE,
        new.id,
        max_age=int(state.sessions.ttl),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_behind_tls(request, state),
    )
    return response


def _behind_tls(request: Request, state: AppState) -> bool:
    """The socket is https, or the config says clients reach us over https (a TLS proxy in front)."""
    public = state.settings.server.public_url
    return request.url.scheme == "https" or (public is not None and public.lower().startswith("https://"))


async def _small_body(request: Request) -> bytes:
    """The sign-in body, refused past SIGN_IN_MAX_BYTES: by its declared length before anything is
    read, else as soon as the bytes read pass the limit."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > SIGN_IN_MAX_BYTES:
        raise PayloadTooLarge(f"The sign-in body is {length} bytes; the limit is {SIGN_IN_MAX_BYTES}.")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > SIGN_IN_MAX_BYTES:
            raise PayloadTooLarge(f"The sign-in body exceeds the limit of {SIGN_IN_MAX_BYTES} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


routes = [
    Route("/admin", index, methods=["GET"]),
    Mount(
        "/admin/ui",
        routes=[
            Route("/session", session, methods=["GET", "POST", "DELETE"]),
            Mount(
                "/static", app=StaticFiles(directory=WEB_DIR), name="dashboard-static"
            ),
        ],
        middleware=[Middleware(SecurityHeadersMiddleware)],
    ),
]
