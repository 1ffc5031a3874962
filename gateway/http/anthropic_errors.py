"""`GatewayError` -> Anthropic's error shape, for the Messages routes.

``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}, "request_id": ...}``
with the gateway's status, which the `anthropic` SDK maps to its typed exceptions (400
BadRequestError, 401 AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError, 413,
429 RateLimitError, 5xx InternalServerError). The message is the one the OpenAI routes give
(`error_body`): an upstream failure's detail stays in the log.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.http.errors import error_body

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    if status in TYPES:
        return TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def anthropic_error_body(exc: GatewayError, request_id: str | None = None) -> dict[str, Any]:
    message = error_body(exc, request_id)["error"]["message"]
    body: dict[str, Any] = {"type": "error", "error": {"type": anthropic_error_type(exc.status_code), "message": message}}
    if request_id:
        body["request_id"] = request_id
    return body


def anthropic_error_event(exc: GatewayError, request_id: str | None = None) -> bytes:
    """A failure after the stream started: the `error` event, which the SDK raises as APIStatusError."""
    return b"event: error\ndata: " + orjson.dumps(anthropic_error_body(exc, request_id)) + b"\n\n"
