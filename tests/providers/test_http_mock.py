"""The fake HTTP client beside the aiohttp one."""

from __future__ import annotations

import pytest

from kernel.errors import ProviderConnectError, ProviderStreamError
from providers.base import UpstreamRequest
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse

T = Timeouts(1, 1, 1, 1)
REQ = UpstreamRequest("POST", "http://x/v1/chat/completions", {}, b"{}")


async def test_records_requests_and_lowercases_headers() -> None:
    client = MockHTTPClient(lambda r: MockResponse(201, {"X-Thing": "1"}, b"ok"))
    resp = await client.send(REQ, T, "e")
    assert (resp.status, resp.headers, await resp.read()) == (201, {"x-thing": "1"}, b"ok")
    assert client.requests == [REQ]
    await client.aclose()
    assert client.closed


async def test_async_handler() -> None:
    async def handler(request: UpstreamRequest) -> MockResponse:
        return MockResponse(body=request.url.encode())

    resp = await MockHTTPClient(handler).send(REQ, T, "e")
    assert await resp.read() == REQ.url.encode()


async def test_handler_raising_is_a_transport_failure() -> None:
    def handler(request: UpstreamRequest) -> MockResponse:
        raise ProviderConnectError("refused", endpoint="e")

    client = MockHTTPClient(handler)
    with pytest.raises(ProviderConnectError):
        await client.send(REQ, T, "e")
    assert client.requests == [REQ]


async def test_chunks_and_exceptions_in_them() -> None:
    mock = MockResponse(chunks=[b"a", b"b", ProviderStreamError("cut", endpoint="e"), b"never"])
    resp = await MockHTTPClient(lambda r: mock).send(REQ, T, "e")
    got = []
    with pytest.raises(ProviderStreamError):
        async for chunk in resp.chunks():
            got.append(chunk)
    assert got == [b"a", b"b"]
    with pytest.raises(ProviderStreamError):
        await resp.read()
    resp.close()
    assert mock.closed


async def test_body_as_one_chunk() -> None:
    resp = await MockHTTPClient(lambda r: MockResponse(body=b"whole")).send(REQ, T, "e")
    assert [c async for c in resp.chunks()] == [b"whole"]
