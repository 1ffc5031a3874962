"""GatewayApp: exact POST matches go straight to their raw ASGI app; the rest takes Starlette's path."""

from __future__ import annotations

import httpx
import pytest
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.http.errors import method_not_allowed, not_found, server_error
from gateway.http.fast import GatewayApp
from gateway.http.middleware import RequestIdMiddleware


async def echo_id(scope: Scope, receive: Receive, send: Send) -> None:
    body = scope["gateway.request_id"].encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-fast", b"1")]})
    await send({"type": "http.response.body", "body": body})


async def explodes(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("a bug")


async def explodes_mid_stream(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    raise RuntimeError("a bug after the response started")


async def slow_path(request: Request) -> Response:
    return PlainTextResponse(f"starlette {request.method}")


def client() -> httpx.AsyncClient:
    app = GatewayApp(
        fast_routes={"/v1/fast": echo_id, "/v1/boom": explodes, "/v1/late": explodes_mid_stream},
        routes=[Route("/v1/fast", slow_path, methods=["POST"]), Route("/v1/fast/", slow_path, methods=["POST"])],
        middleware=[Middleware(RequestIdMiddleware)],
        exception_handlers={404: not_found, 405: method_not_allowed, Exception: server_error},
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://test")


async def test_an_exact_post_match_skips_the_router_and_still_gets_a_request_id() -> None:
    async with client() as c:
        r = await c.post("/v1/fast", json={})
        given = await c.post("/v1/fast", json={}, headers={"x-request-id": "client-id-1"})
    assert r.status_code == 200 and r.headers["x-fast"] == "1"
    assert r.text.startswith("req_") and len(r.text) == 36
    assert given.text == "client-id-1"


async def test_other_methods_and_paths_take_the_starlette_path() -> None:
    async with client() as c:
        slash = await c.post("/v1/fast/", json={})
        wrong_method = await c.get("/v1/fast")
    assert slash.text == "starlette POST" and "x-fast" not in slash.headers
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"


async def test_an_unexpected_exception_becomes_a_500_with_openai_error_json() -> None:
    async with client() as c:
        r = await c.post("/v1/boom", json={}, headers={"x-request-id": "trace-me"})
    assert r.status_code == 500
    assert r.json() == {
        "error": {
            "message": "The gateway had an internal error while processing your request.",
            "type": "api_error",
            "param": None,
            "code": "internal_error",
        }
    }
    assert r.headers["x-request-id"] == "trace-me"
    assert "a bug" not in r.text  # details go to the log only


async def test_the_exception_still_reaches_the_server() -> None:
    app = GatewayApp(fast_routes={"/v1/boom": explodes}, routes=[])
    transport = httpx.ASGITransport(app=app)  # raises what the app raises, as a server would log it
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        with pytest.raises(RuntimeError, match="a bug"):
            await c.post("/v1/boom", json={})


async def test_after_the_response_started_no_second_response_is_sent() -> None:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    app = GatewayApp(fast_routes={"/v1/late": explodes_mid_stream}, routes=[])
    scope = {"type": "http", "method": "POST", "path": "/v1/late", "headers": [], "query_string": b""}
    with pytest.raises(RuntimeError):
        await app(scope, receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200
