"""Pure ASGI middleware (no per-request task or body buffering, unlike BaseHTTPMiddleware)."""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_VALID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if 0 < len(text) <= 128 and set(text) <= _VALID:
                return text
            return None
    return None


class RequestIdMiddleware:
    """Gives every HTTP request an id (the client's x-request-id if sane) and every response the header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_id(scope) or f"req_{uuid.uuid4().hex}"
        scope["gateway.request_id"] = request_id
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                if not any(name == b"x-request-id" for name, _ in headers):
                    headers.append(header)
            await send(message)

        await self.app(scope, receive, send_with_id)
