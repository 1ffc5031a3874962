"""Header limits: one huge header line, or a flood of header lines, is refused with a clear error."""

from __future__ import annotations

import asyncio

import pytest

from kernel.errors import ProviderResponseTooLarge
from providers.http import HTTPClient
from tests.providers.http_contract.conftest import SLOW_OK, post
from tests.providers.http_contract.servers import Conn, RawServer


def answering(head: bytes) -> RawServer:
    async def handler(conn: Conn) -> None:
        await conn.request()
        conn.write(head + b"content-length: 2\r\n\r\n{}")
        await conn.writer.drain()
        await conn.request()  # hold the connection open: the client must give up by itself

    return RawServer(handler)


async def test_a_100_kib_header_is_refused(client: HTTPClient) -> None:
    async with answering(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (100 * 1024) + b"\r\n") as server:
        with pytest.raises(ProviderResponseTooLarge) as info:
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
    assert "header" in info.value.message


async def test_ten_thousand_headers_are_refused(client: HTTPClient) -> None:
    flood = b"".join(b"x-h%d: v\r\n" % i for i in range(10_000))
    async with answering(b"HTTP/1.1 200 OK\r\n" + flood) as server:
        with pytest.raises(ProviderResponseTooLarge) as info:
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
    assert "header" in info.value.message


async def test_ordinary_headers_pass(client: HTTPClient) -> None:
    normal = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 100) for i in range(60))
    async with answering(b"HTTP/1.1 200 OK\r\n" + normal) as server:
        resp = await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
        assert resp.headers["x-h59"] == "v" * 100
        assert await resp.read() == b"{}"
