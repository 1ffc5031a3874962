"""The HTTP edge's error mapping: `GatewayError` -> OpenAI error JSON (body, SSE event)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from kernel.errors import GatewayError, NotFound


def error_body(exc: GatewayError, request_id: str | None = None) -> dict[str, dict[str, object]]:
    """The client's view: an upstream failure says only what kind it was (`client_message`) and
    the request id to quote; its detail is in the log and the request record. An upstream's
    refusal of the request itself (ProviderRejected) is passed through as it came."""
    message = exc.client_message()
    if request_id and message != exc.message:  # a detail was held back: say where to find it
        message = f"{message} (request id {request_id})"
    return {"error": {"message": message, "type": exc.error_type, "param": exc.param, "code": exc.code}}


def error_response(exc: GatewayError, headers: Mapping[str, str] | None = None) -> Response:
    merged = dict(headers or {})
    merged.update(exc.headers)
    body = error_body(exc, merged.get("x-request-id"))
    return Response(orjson.dumps(body), status_code=exc.status_code, headers=merged, media_type="application/json")


def error_event(exc: GatewayError, request_id: str | None = None) -> bytes:
    return b"data: " + orjson.dumps(error_body(exc, request_id)) + b"\n\n"


async def gateway_error(request: Request, exc: Exception) -> Response:
    """The one handler of a `GatewayError` that a (non-fast) route raises: the app registers it.
    The request id goes into the body of an error whose detail was held back (and, outside the
    request-id middleware, into the headers)."""
    assert isinstance(exc, GatewayError)
    return error_response(exc, {"x-request-id": request.scope.get("gateway.request_id", "")})


async def not_found(request: Request, exc: Exception) -> Response:
    url = f"{request.method} {request.url.path}"
    return await gateway_error(request, NotFound(f"Unknown request URL: {url}. Please check the URL and method."))


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    err = GatewayError(f"Method {request.method} is not allowed for {request.url.path}.", code="method_not_allowed")
    err.status_code = 405
    err.error_type = "invalid_request_error"
    return await gateway_error(request, err)


async def server_error(request: Request, exc: Exception) -> Response:
    # Details go to the log (uvicorn logs the traceback), never to the client.
    internal = GatewayError("The gateway had an internal error while processing your request.", code="internal_error")
    return await gateway_error(request, internal)
