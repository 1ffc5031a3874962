"""Bodies of every size that matters (around the old 1 MiB read-pause, up to the 64 MiB limit),
sized or chunked, plain or compressed, read whole or streamed; past the limit, refused."""

from __future__ import annotations

import asyncio
import base64
import functools
import random
import tracemalloc
import zlib

import brotli
import pytest

from kernel.errors import ProviderResponseTooLarge
from providers.http import HTTPClient, Timeouts
from providers.settings import MiB, UpstreamLimits
from tests.providers.http_contract.conftest import SLOW_OK, MakeClient, no_env, post
from tests.providers.http_contract.servers import Conn, Head, RawServer, keep_serving

SIZES = [0, MiB - 1, MiB + 1, 16 * MiB, 64 * MiB]


@functools.lru_cache(maxsize=8)
def payload(size: int) -> bytes:
    """Text that compresses like JSON does (about 4:3), the same for a given size."""
    raw = random.Random(size).randbytes(size * 3 // 4 + 3)
    return base64.b64encode(raw)[:size]


@functools.lru_cache(maxsize=8)
def encoded(size: int, encoding: str) -> bytes:
    data = payload(size)
    if encoding == "gzip":
        c = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if encoding == "deflate":
        return zlib.compress(data, 1)
    if encoding == "br":
        return brotli.compress(data, quality=1)
    return data


def serving(size: int, encoding: str, chunked: bool) -> RawServer:
    async def answer(conn: Conn, head: Head) -> None:
        headers = {"content-type": "application/json"}
        if encoding != "identity":
            headers["content-encoding"] = encoding
        await conn.respond(encoded(size, encoding), headers=headers, chunked=chunked)

    return RawServer(keep_serving(answer))


async def fetch(client: HTTPClient, server: RawServer, *, stream: bool = False, timeouts: Timeouts = SLOW_OK) -> bytes:
    resp = await client.send(post(server.url(), stream=stream), timeouts, "e")
    assert resp.status == 200
    if not stream:
        return await resp.read()
    try:
        return b"".join([chunk async for chunk in resp.chunks()])
    finally:
        resp.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s}B")
async def test_plain_bodies_arrive_whole(client: HTTPClient, size: int, chunked: bool) -> None:
    async with serving(size, "identity", chunked) as server:
        # Two in a row on one connection: the first must leave it clean for the second.
        for _ in range(2):
            assert await asyncio.wait_for(fetch(client, server), 60) == payload(size)
    assert server.accepted == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
@pytest.mark.parametrize("size", [MiB + 1, 16 * MiB], ids=lambda s: f"{s}B")
async def test_compressed_bodies_are_decoded(client: HTTPClient, size: int, encoding: str, chunked: bool) -> None:
    async with serving(size, encoding, chunked) as server:
        assert await asyncio.wait_for(fetch(client, server), 60) == payload(size)


async def test_a_64_mib_gzip_body_is_within_the_limit(client: HTTPClient) -> None:
    async with serving(64 * MiB, "gzip", True) as server:
        assert await asyncio.wait_for(fetch(client, server), 60) == payload(64 * MiB)


@pytest.mark.parametrize("size", [MiB + 1, 16 * MiB], ids=lambda s: f"{s}B")
async def test_large_streamed_bodies_arrive_whole(client: HTTPClient, size: int) -> None:
    async with serving(size, "identity", True) as server:
        assert await asyncio.wait_for(fetch(client, server, stream=True), 60) == payload(size)


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_one_byte_past_the_limit_is_refused(client: HTTPClient, chunked: bool) -> None:
    async with serving(64 * MiB + 1, "identity", chunked) as server:
        with pytest.raises(ProviderResponseTooLarge) as info:
            await asyncio.wait_for(fetch(client, server), 60)
    assert info.value.code == "upstream_response_too_large"
    assert "max_response_bytes" in info.value.message


async def test_a_stream_past_the_limit_is_refused(make_client: MakeClient) -> None:
    client = make_client(no_env(limits=UpstreamLimits(max_response_bytes=MiB)))
    async with serving(2 * MiB, "identity", True) as server:
        with pytest.raises(ProviderResponseTooLarge):
            await asyncio.wait_for(fetch(client, server, stream=True), 60)


def gzip_bomb_parts() -> tuple[bytes, bytes]:
    """A gzip header and a deflate block that inflates to 1 MiB of zeros; the block repeats, so
    10 MiB of it is 10 GiB decoded, and nobody has to compress 10 GiB to make it."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    first = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH) == block  # steady state: it repeats
    return first, block


async def test_a_gzip_bomb_is_refused_at_the_limit_not_by_memory(make_client: MakeClient) -> None:
    limit = 8 * MiB
    client = make_client(no_env(limits=UpstreamLimits(max_response_bytes=limit)))
    first, block = gzip_bomb_parts()
    sent = 0

    async def bomb(conn: Conn) -> None:
        nonlocal sent
        await conn.request()
        conn.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                   b"transfer-encoding: chunked\r\n\r\n")
        conn.write(b"%x\r\n%s\r\n" % (len(first), first))
        for _ in range(10 * 1024):  # 10 GiB decoded, about 10 MiB on the wire
            conn.write(b"%x\r\n%s\r\n" % (len(block), block))
            await conn.writer.drain()
            sent += 1

    async with RawServer(bomb) as server:
        tracemalloc.start()
        try:
            with pytest.raises(ProviderResponseTooLarge):
                await asyncio.wait_for(fetch(client, server, timeouts=Timeouts(5.0, 10.0, 10.0, 30.0)), 60)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 8 * limit, f"decoding peaked at {peak / MiB:.0f} MiB for a {limit / MiB:.0f} MiB limit"
    # Loopback socket buffers hold a few MiB of it unread; the point is that the client hung up.
    assert sent < 10 * 1024, "the client read the whole bomb"


@pytest.mark.parametrize("size", [MiB + 1, 16 * MiB], ids=lambda s: f"{s}B")
async def test_large_request_bodies_go_out_whole_and_sized(client: HTTPClient, size: int) -> None:
    """A big embeddings batch upstream: sent whole with its content-length, and without the
    client warning that it blocks the loop (tests turn warnings into errors)."""
    body = payload(size)

    async def answer(conn: Conn, head: Head) -> None:
        await conn.respond(b'{"n": %d}' % len(head.body), headers={"content-type": "application/json"})

    async with RawServer(keep_serving(answer)) as server:
        request = post(server.url())
        request = type(request)(request.method, request.url, request.headers, body, False)
        resp = await client.send(request, SLOW_OK, "e")
        assert resp.status == 200
        assert await resp.read() == b'{"n": %d}' % size
        (head,) = server.requests
        assert head.headers["content-length"] == str(size) and head.body == body
