"""The basics against the fake OpenAI upstream: JSON and SSE round trips, error statuses returned
(not raised), and every transport failure a ProviderError."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from kernel.errors import ProviderConnectError, ProviderStreamError, ProviderTimeout
from providers.base import UpstreamRequest
from providers.http import HTTPClient, Timeouts
from providers.settings import UpstreamLimits
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.providers.http_contract.conftest import MakeClient, no_env

FAST = Timeouts(connect=1.0, first_byte=1.0, between_chunks=1.0, total=5.0)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def upstream() -> AsyncIterator[FakeOpenAIUpstream]:
    async with FakeOpenAIUpstream() as up:
        yield up


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


async def test_the_connection_limit_is_released_after_errors(make_client: MakeClient, upstream: FakeOpenAIUpstream) -> None:
    client = make_client(no_env(limits=UpstreamLimits(max_connections=1)))
    for model in ("m", "m@status:503", "m@reset", "m"):
        try:
            resp = await client.send(post(upstream.url + "/chat/completions", {**CHAT, "model": model}), FAST, "e")
        except ProviderConnectError:
            continue
        await resp.read()
    resp = await asyncio.wait_for(client.send(post(upstream.url + "/chat/completions", CHAT), FAST, "e"), 2.0)
    assert resp.status == 200
    resp.close()
