"""Pure ASGI middleware (no per-request task or body buffering, unlike BaseHTTPMiddleware)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_VALID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


def request_id_for(scope: Scope) -> str:
    """The client's x-request-id when it is sane, else a new random one."""
    return _incoming_id(scope) or f"req_{os.urandom(16).hex()}"


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text: str = value.decode("latin-1")
            if 0 < len(text) <= 128 and set(text) <= _VALID:
                return text
            return None
    return None


class RequestIdMiddleware:
    """Gives every HTTP request an id (the client's x-request-id if sane) and every response the
    gateway's headers. Inference handlers set their own; any other response (models, health, an
    unknown route) gets ``x-gateway-attempts: 0`` and the time it took as its overhead."""

    def __init__(self, app: ASGIApp, clock: Callable[[], float] = time.perf_counter) -> None:
        self.app = app
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self._clock()
        request_id = request_id_for(scope)
        scope["gateway.request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.setdefault("headers", [])
                names = {name for name, _ in headers}
                if b"x-request-id" not in names:
                    headers.append((b"x-request-id", request_id.encode()))
                if b"x-gateway-attempts" not in names:
                    headers.append((b"x-gateway-attempts", b"0"))
                if b"x-gateway-overhead-ms" not in names:
                    headers.append((b"x-gateway-overhead-ms", f"{(self._clock() - started) * 1000.0:.3f}".encode()))
            await send(message)

        await self.app(scope, receive, send_with_id)
