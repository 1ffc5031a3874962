"""The HTTP edge's mapping of GatewayError to OpenAI error JSON."""

from __future__ import annotations

from pathlib import Path

import orjson
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.http.errors import error_body, error_event, error_response
from kernel.errors import AllAttemptsFailed, InvalidRequest, ProviderTimeout
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, USER, answer, settings


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


def test_a_route_that_raises_is_answered_by_the_one_registered_handler(tmp_path: Path) -> None:
    """The non-fast routes raise their GatewayError; the app's one handler makes it OpenAI error
    JSON carrying the request's id (the middleware's), with the admin paths' no-store."""
    config = settings(tmp_path, None, metrics={"enabled": False})
    with TestClient(create_app(config, client_factory=lambda: MockHTTPClient(answer))) as client:
        models = client.get("/v1/models", headers={"x-request-id": "req-models-1"})
        assert models.status_code == 401 and models.json()["error"]["type"] == "invalid_request_error"
        assert models.headers["x-request-id"] == "req-models-1"
        admin = client.get("/admin/api/endpoints", headers={"authorization": "Bearer sk-wrong-000000000"})
        assert admin.status_code == 401 and admin.headers["cache-control"] == "no-store"
        assert admin.headers["x-request-id"].startswith("req_")
        explain = client.post("/admin/api/route/explain", headers=ADMIN, content=b"{")
        assert explain.status_code == 400 and explain.json()["error"]["message"].startswith("The body must be JSON")
        unknown = client.get("/v1/models/no-such-model", headers=USER)
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        metrics = client.get("/metrics")
        assert metrics.status_code == 404 and metrics.json()["error"]["message"] == "Metrics are disabled (metrics.enabled)."
        assert client.get("/v1/models", headers=USER).status_code == 200
