"""The HTTP edge's error mapping: `GatewayError` -> OpenAI error JSON (body, SSE event)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError, NotFound


def error_body(exc: GatewayError) -> dict[str, dict[str, object]]:
    return {"error": {"message": exc.message, "type": exc.error_type, "param": exc.param, "code": exc.code}}


def error_response(exc: GatewayError, headers: Mapping[str, str] | None = None) -> Response:
    merged = dict(headers or {})
    merged.update(exc.headers)
    return Response(orjson.dumps(error_body(exc)), status_code=exc.status_code, headers=merged, media_type="application/json")


def error_event(exc: GatewayError) -> bytes:
    return b"data: " + orjson.dumps(error_body(exc)) + b"\n\n"


async def not_found(request: Request, exc: Exception) -> Response:
    return error_response(
        NotFound(f"Unknown request URL: {request.method} {request.url.path}. Please check the URL and method."),
        {"x-request-id": request.scope.get("gateway.request_id", "")},
    )


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    err = GatewayError(f"Method {request.method} is not allowed for {request.url.path}.", code="method_not_allowed")
    err.status_code = 405
    err.error_type = "invalid_request_error"
    return error_response(err, {"x-request-id": request.scope.get("gateway.request_id", "")})


async def server_error(request: Request, exc: Exception) -> Response:
    # Details go to the log (uvicorn logs the traceback), never to the client.
    return error_response(
        GatewayError("The gateway had an internal error while processing your request.", code="internal_error"),
        {"x-request-id": request.scope.get("gateway.request_id", "")},
    )
