"""RequestIdMiddleware: an id for every request, and the gateway headers on every response."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from gateway.http.middleware import RequestIdMiddleware


async def plain(request: Request) -> Response:
    return PlainTextResponse(request.scope["gateway.request_id"])


async def own_headers(request: Request) -> Response:
    return PlainTextResponse(
        "x", headers={"x-request-id": "set-by-handler", "x-gateway-attempts": "3", "x-gateway-overhead-ms": "1.000"}
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.002  # each reading is 2 ms later
        return self.t


def client() -> httpx.AsyncClient:
    app = Starlette(
        routes=[Route("/", plain), Route("/own", own_headers)],
        middleware=[Middleware(RequestIdMiddleware, clock=Clock())],
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_generated_id_reaches_the_handler_and_the_response() -> None:
    async with client() as c:
        resp = await c.get("/")
    assert resp.headers["x-request-id"].startswith("req_")
    assert resp.text == resp.headers["x-request-id"]


async def test_sane_client_id_is_kept() -> None:
    async with client() as c:
        resp = await c.get("/", headers={"x-request-id": "abc-123_x.y:z"})
    assert resp.headers["x-request-id"] == resp.text == "abc-123_x.y:z"


async def test_insane_client_ids_are_replaced() -> None:
    async with client() as c:
        for bad in (b"has space", b"x" * 129, b"semi;colon", "ünïcode".encode()):
            resp = await c.get("/", headers=[(b"x-request-id", bad)])
            assert resp.headers["x-request-id"].startswith("req_"), bad


async def test_default_gateway_headers() -> None:
    async with client() as c:
        resp = await c.get("/")
        missing = await c.get("/nowhere")
    for r in (resp, missing):
        assert r.headers["x-gateway-attempts"] == "0"
        assert r.headers["x-gateway-overhead-ms"] == "2.000"  # one clock tick between arrival and response
        assert r.headers.get_list("x-request-id") == [r.headers["x-request-id"]]


async def test_handler_headers_win_and_are_not_duplicated() -> None:
    async with client() as c:
        resp = await c.get("/own")
    assert resp.headers.get_list("x-request-id") == ["set-by-handler"]
    assert resp.headers.get_list("x-gateway-attempts") == ["3"]
    assert resp.headers.get_list("x-gateway-overhead-ms") == ["1.000"]
