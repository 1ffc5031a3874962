"""The application object: Starlette, with the inference routes served one step from the server.

`POST /v1/chat/completions`, `/v1/completions` and `/v1/embeddings` are most of the traffic. They
are raw ASGI apps (`InferenceEndpoint`) that set every gateway header themselves, so for an exact
path match the app calls them directly instead of through the middleware stack and the router's
regex scan: about a tenth of the gateway's CPU per request at saturation. Everything else (other
methods, trailing slashes, admin, health, 404s) takes the ordinary Starlette path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.errors import error_body
from gateway.http.middleware import request_id_for
from kernel.errors import GatewayError

log = logging.getLogger("gateway.http")


class GatewayApp(Starlette):
    def __init__(self, *args: Any, fast_routes: Mapping[str, ASGIApp], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast_routes = dict(fast_routes)  # exact path -> app, for POST only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.fast_routes.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self
                scope["gateway.request_id"] = request_id_for(scope)
                await _guarded(endpoint, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


async def _guarded(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """What Starlette's ServerErrorMiddleware does for the other routes: an unexpected exception
    becomes a 500 with OpenAI error JSON when no response has started, then goes on to the
    server, which logs it."""
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except Exception:
        if not started:
            exc = GatewayError("The gateway had an internal error while processing your request.", code="internal_error")
            body = orjson.dumps(error_body(exc))
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", scope["gateway.request_id"].encode()),
            ]
            await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        raise
