"""Both upstream HTTP clients (aiohttp and the native one) against real loopback servers: every
failure becomes a ProviderError."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from gateway.errors import ProviderConnectError, ProviderStreamError, ProviderTimeout
from providers.base import UpstreamRequest
from providers.http import AiohttpClient, HTTPClient, Timeouts
from providers.http_native import NativeClient
from tests.fakes.openai_upstream import FakeOpenAIUpstream

FAST = Timeouts(connect=1.0, first_byte=1.0, between_chunks=1.0, total=5.0)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAIUpstream]:
    async with FakeOpenAIUpstream() as up:
        yield up


@pytest.fixture(params=["native", "aiohttp"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[HTTPClient]:
    c: HTTPClient = NativeClient() if request.param == "native" else AiohttpClient()
    yield c
    await c.aclose()


def post(url: str, body: dict[str, object], stream: bool = False) -> UpstreamRequest:
    return UpstreamRequest("POST", url, {"content-type": "application/json", "x-test": "1"}, orjson.dumps(body), stream)


async def test_json_round_trip(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    resp = await client.send(post(upstream.url + "/chat/completions", CHAT), FAST, "e")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["content-type"].startswith("application/json")  # case-insensitive
    assert orjson.loads(await resp.read())["choices"][0]["message"]["content"] == "You said: hi"
    assert upstream.requests[0].headers["x-test"] == "1"
    assert "user-agent" not in upstream.requests[0].headers


async def test_stream_chunks(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    resp = await client.send(post(upstream.url + "/chat/completions", {**CHAT, "stream": True}, True), FAST, "e")
    body = b"".join([chunk async for chunk in resp.chunks()])
    assert body.endswith(b"data: [DONE]\n\n")
    resp.close()


async def test_error_status_is_returned_not_raised(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    resp = await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": "m@status:503"}), FAST, "e")
    assert resp.status == 503
    assert orjson.loads(await resp.read())["error"]["message"] == "fake upstream error 503"


async def test_connection_refused(client: HTTPClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(ProviderConnectError) as info:
            await client.send(post(f"http://127.0.0.1:{port}/v1/chat/completions", CHAT), FAST, "refused/m")
    assert info.value.endpoint == "refused/m" and info.value.retryable


async def test_reset_before_the_response(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(ProviderConnectError):
        await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": "m@reset"}), FAST, "e")


async def test_first_byte_timeout(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    timeouts = Timeouts(connect=1.0, first_byte=0.1, between_chunks=1.0, total=5.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ProviderTimeout) as info:
        await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": "m@slow:2"}), timeouts, "e")
    assert loop.time() - start < 1.0
    assert "first byte" in info.value.message


async def test_partial_body_then_reset(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    resp = await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": "m@cut"}), FAST, "e")
    assert resp.status == 200
    with pytest.raises(ProviderConnectError):
        await resp.read()


async def test_stream_cut(client: HTTPClient, upstream: FakeOpenAIUpstream) -> None:
    resp = await client.send(
        post(upstream.url + "/chat/completions", {**CHAT, "model": "m@cut:2", "stream": True}, True), FAST, "e"
    )
    received = b""
    with pytest.raises(ProviderStreamError):
        async for chunk in resp.chunks():
            received += chunk
    assert received.count(b"data: ") == 2
    resp.close()


async def test_between_chunks_timeout(client: HTTPClient) -> None:
    async with FakeOpenAIUpstream(chunk_delay=0.5) as slow:
        timeouts = Timeouts(connect=1.0, first_byte=1.0, between_chunks=0.1, total=5.0)
        resp = await client.send(post(slow.url + "/chat/completions", {**CHAT, "stream": True}, True), timeouts, "e")
        with pytest.raises(ProviderTimeout) as info:
            async for _ in resp.chunks():
                pass
        resp.close()
    assert "next chunk" in info.value.message


async def test_total_deadline(client: HTTPClient) -> None:
    async with FakeOpenAIUpstream(chunk_delay=0.08) as slow:
        timeouts = Timeouts(connect=1.0, first_byte=1.0, between_chunks=1.0, total=0.2)
        resp = await client.send(post(slow.url + "/chat/completions", {**CHAT, "stream": True}, True), timeouts, "e")
        with pytest.raises(ProviderTimeout) as info:
            async for _ in resp.chunks():
                pass
        resp.close()
    assert "whole response" in info.value.message


async def test_read_honours_the_total_deadline(client: HTTPClient) -> None:
    async def dribble(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "application/json"})
        await resp.prepare(request)
        for _ in range(20):
            await resp.write(b" ")
            await asyncio.sleep(0.05)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", dribble)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        timeouts = Timeouts(connect=1.0, first_byte=1.0, between_chunks=1.0, total=0.2)
        resp = await client.send(post(f"http://127.0.0.1:{port}/v1/chat/completions", CHAT), timeouts, "e")
        with pytest.raises(ProviderTimeout):
            await resp.read()
    finally:
        await runner.cleanup()


async def _serve(app: web.Application, **kwargs: object) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, shutdown_timeout=0.1, **kwargs)  # type: ignore[arg-type]
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_native_keeps_connections_alive() -> None:
    peers: list[object] = []

    async def echo(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        return web.json_response({"n": len(peers)})

    app = web.Application()
    app.router.add_post("/v1/x", echo)
    runner, port = await _serve(app)
    client = NativeClient()
    try:
        for _ in range(3):
            resp = await client.send(post(f"http://127.0.0.1:{port}/v1/x", CHAT), FAST, "e")
            assert resp.status == 200
            await resp.read()
        assert len(peers) == 3 and len(set(peers)) == 1  # one connection, reused
    finally:
        await client.aclose()
        await runner.cleanup()


async def test_native_skips_an_idle_connection_the_server_closed() -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/x", echo)
    runner, port = await _serve(app, keepalive_timeout=0.05)
    client = NativeClient()
    try:
        resp = await client.send(post(f"http://127.0.0.1:{port}/v1/x", CHAT), FAST, "e")
        await resp.read()
        await asyncio.sleep(0.3)  # the server closes the idle keep-alive connection
        resp = await client.send(post(f"http://127.0.0.1:{port}/v1/x", CHAT), FAST, "e")
        assert orjson.loads(await resp.read()) == {"ok": True}
    finally:
        await client.aclose()
        await runner.cleanup()


async def test_native_decodes_gzip_and_chunked_bodies() -> None:
    async def gz(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "application/json"})
        resp.enable_compression(web.ContentCoding.gzip)
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in (b'{"a": ', b'"' + b"x" * 5000 + b'"', b"}"):
            await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/x", gz)
    runner, port = await _serve(app)
    client = NativeClient()
    try:
        resp = await client.send(post(f"http://127.0.0.1:{port}/v1/x", CHAT), FAST, "e")
        assert resp.headers["Content-Encoding"] == "gzip"
        assert orjson.loads(await resp.read()) == {"a": "x" * 5000}
    finally:
        await client.aclose()
        await runner.cleanup()


async def test_native_refuses_header_injection(upstream: FakeOpenAIUpstream) -> None:
    client = NativeClient()
    try:
        bad = UpstreamRequest("POST", upstream.url + "/chat/completions", {"x-a": "1\r\nx-b: 2"}, b"{}")
        with pytest.raises(ProviderConnectError):
            await client.send(bad, FAST, "e")
        assert upstream.requests == []
    finally:
        await client.aclose()


async def test_native_connection_limit_is_released(upstream: FakeOpenAIUpstream) -> None:
    client = NativeClient(max_connections=1)
    try:
        for model in ("m", "m@status:503", "m@reset", "m"):
            try:
                resp = await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": model}), FAST, "e")
            except ProviderConnectError:
                continue
            await resp.read()
        resp = await asyncio.wait_for(client.send(post(upstream.url + "/chat/completions", CHAT), FAST, "e"), 2.0)
        assert resp.status == 200
        resp.close()
    finally:
        await client.aclose()
