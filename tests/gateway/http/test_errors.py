"""The HTTP edge's mapping of GatewayError to OpenAI error JSON."""

from __future__ import annotations

import orjson

from gateway.http.errors import error_body, error_event, error_response
from kernel.errors import AllAttemptsFailed, InvalidRequest, ProviderTimeout


def test_error_body() -> None:
    body = error_body(InvalidRequest("Missing required parameter: 'messages'.", param="messages"))
    assert body == {
        "error": {
            "message": "Missing required parameter: 'messages'.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }


def test_error_response_merges_headers() -> None:
    exc = AllAttemptsFailed("x", last=ProviderTimeout("t", retry_after=3), attempts=2)
    resp = error_response(exc, {"x-request-id": "r1", "x-gateway-attempts": "2"})
    assert resp.status_code == 504
    assert resp.headers["retry-after"] == "3"
    assert resp.headers["x-request-id"] == "r1" and resp.headers["x-gateway-attempts"] == "2"
    assert resp.media_type == "application/json"
    assert orjson.loads(resp.body)["error"]["code"] == "upstream_timeout"


def test_error_event() -> None:
    event = error_event(InvalidRequest("bad", param="n"))
    assert event == b'data: {"error":{"message":"bad","type":"invalid_request_error","param":"n","code":null}}\n\n'
