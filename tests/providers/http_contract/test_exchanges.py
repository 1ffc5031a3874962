"""Slow, stalled and broken upstreams, connection reuse, and the unusual-but-legal answers
(100 Continue, 204, HEAD, trailers, Connection: close)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from kernel.errors import ProviderConnectError, ProviderError, ProviderStreamError, ProviderTimeout
from providers.base import UpstreamRequest
from providers.http import HTTPClient, Timeouts
from tests.providers.http_contract.conftest import SLOW_OK, post
from tests.providers.http_contract.servers import Conn, Head, RawServer, answer_ok, keep_serving

OK_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"


def dribbling(body: bytes, gap: float, *, stall_after: int | None = None) -> RawServer:
    """Sends `body` one byte every `gap` seconds (and goes silent after `stall_after` bytes)."""

    async def handler(conn: Conn) -> None:
        await conn.request()
        conn.write(OK_HEAD + b"content-length: %d\r\n\r\n" % len(body))
        for i, byte in enumerate(body):
            if stall_after is not None and i >= stall_after:
                await asyncio.sleep(3600)
            conn.write(bytes([byte]))
            await conn.writer.drain()
            await asyncio.sleep(gap)

    return RawServer(handler)


@pytest.mark.parametrize("stream", [False, True], ids=["read", "chunks"])
async def test_a_slow_body_within_the_gap_timeout_arrives(client: HTTPClient, stream: bool) -> None:
    body = b'{"text": "' + b"x" * 40 + b'"}'  # 52 bytes at 10 ms each: half a second or more
    timeouts = Timeouts(connect=5.0, first_byte=5.0, between_chunks=2.0, total=60.0)
    async with dribbling(body, 0.01) as server:
        resp = await client.send(post(server.url(), stream=stream), timeouts, "e")
        if stream:
            got = b"".join([c async for c in resp.chunks()])
            resp.close()
        else:
            got = await resp.read()
    assert got == body


@pytest.mark.parametrize("stream", [False, True], ids=["read", "chunks"])
async def test_a_body_that_stalls_past_the_gap_timeout_times_out(client: HTTPClient, stream: bool) -> None:
    timeouts = Timeouts(connect=5.0, first_byte=5.0, between_chunks=0.3, total=60.0)
    loop = asyncio.get_running_loop()
    async with dribbling(b"x" * 100, 0.01, stall_after=5) as server:
        resp = await client.send(post(server.url(), stream=stream), timeouts, "e")
        start = loop.time()
        with pytest.raises(ProviderTimeout) as info:
            if stream:
                async for _ in resp.chunks():
                    pass
            else:
                await asyncio.wait_for(resp.read(), 30)
        resp.close()
    assert loop.time() - start < 10, "the gap timeout, not the total one, ended it"
    assert "next chunk" in info.value.message


def closing(prefix: bytes) -> RawServer:
    """Answers the first request with `prefix` and closes the connection."""

    async def handler(conn: Conn) -> None:
        await conn.request()
        conn.write(prefix)
        await conn.writer.drain()
        conn.close()

    return RawServer(handler)


@pytest.mark.parametrize(
    "prefix",
    [OK_HEAD + b"content-length: 1000\r\n\r\n" + b"x" * 300, OK_HEAD + b"transfer-encoding: chunked\r\n\r\n100\r\n" + b"x" * 50],
    ids=["mid-body", "mid-chunk"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["read", "chunks"])
async def test_a_close_in_the_middle_of_the_body_is_an_error(client: HTTPClient, prefix: bytes, stream: bool) -> None:
    async with closing(prefix) as server:
        resp = await client.send(post(server.url(), stream=stream), SLOW_OK, "e")
        expected = ProviderStreamError if stream else ProviderConnectError
        with pytest.raises(expected):
            if stream:
                async for _ in resp.chunks():
                    pass
            else:
                await asyncio.wait_for(resp.read(), 30)
        resp.close()


async def test_a_close_in_the_middle_of_the_headers_is_a_connect_error(client: HTTPClient) -> None:
    async with closing(b"HTTP/1.1 200 OK\r\ncontent-type: appl") as server:
        with pytest.raises(ProviderConnectError):
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
    assert len(server.requests) == 1  # it had started answering: not sent again


async def test_a_reset_before_the_answer_is_not_sent_again(client: HTTPClient) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        # A TCP reset (linger 0): the upstream crashed on it, so another try is the dispatcher's call.
        conn.writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    async with RawServer(handler) as server:
        with pytest.raises(ProviderConnectError):
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
    assert len(server.requests) == 1


async def test_a_keep_alive_connection_closed_between_requests_is_retried_once_on_a_fresh_one(
    client: HTTPClient,
) -> None:
    """The upstream keeps the first connection open, then drops it when the second request arrives
    on it (its idle timeout racing our reuse): the client sends that request again, once, on a new
    connection, instead of failing it."""

    async def handler(conn: Conn) -> None:
        while (head := await conn.request()) is not None:
            if conn.index == 0 and conn.served == 1:
                conn.close()
                return
            await answer_ok(conn, head)

    async with RawServer(handler) as server:
        for _ in range(3):
            resp = await client.send(post(server.url()), SLOW_OK, "e")
            assert resp.status == 200 and await resp.read() == b'{"ok": true}'
    assert server.accepted == 2
    assert len(server.requests) == 4  # the dropped one, and its one retry


async def test_a_connection_that_always_drops_fails_after_one_retry(client: HTTPClient) -> None:
    async def handler(conn: Conn) -> None:
        await conn.request()
        conn.close()

    async with RawServer(handler) as server:
        with pytest.raises(ProviderConnectError):
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
    assert len(server.requests) == 2


async def test_an_idle_connection_the_server_closed_is_not_reused(client: HTTPClient) -> None:
    async def handler(conn: Conn) -> None:
        head = await conn.request()
        assert head is not None
        await answer_ok(conn, head)
        conn.close()  # a FIN while the connection sits in the client's pool

    async with RawServer(handler) as server:
        for _ in range(2):
            resp = await client.send(post(server.url()), SLOW_OK, "e")
            assert await resp.read() == b'{"ok": true}'
            await asyncio.sleep(0.2)
    assert len(server.requests) == 2


async def test_connection_close_is_honoured(client: HTTPClient) -> None:
    async def answer(conn: Conn, head: Head) -> None:
        await conn.respond(b"{}", headers={"connection": "close"})
        conn.close()

    async with RawServer(keep_serving(answer)) as server:
        for _ in range(3):
            resp = await client.send(post(server.url()), SLOW_OK, "e")
            assert await resp.read() == b"{}"
    assert server.accepted == 3 and len(server.requests) == 3


async def test_an_interim_100_continue_is_skipped(client: HTTPClient) -> None:
    async def answer(conn: Conn, head: Head) -> None:
        conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await conn.respond(b'{"after": "continue"}', headers={"content-type": "application/json"})

    async with RawServer(keep_serving(answer)) as server:
        resp = await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
        assert resp.status == 200
        assert await asyncio.wait_for(resp.read(), 30) == b'{"after": "continue"}'


async def test_204_has_no_body_and_keeps_the_connection(client: HTTPClient) -> None:
    async def answer(conn: Conn, head: Head) -> None:
        conn.write(b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n")
        await conn.writer.drain()

    async with RawServer(keep_serving(answer)) as server:
        for _ in range(2):
            resp = await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)
            assert resp.status == 204
            assert await asyncio.wait_for(resp.read(), 30) == b""
    assert server.accepted == 1


async def test_head_has_no_body_despite_its_content_length(client: HTTPClient) -> None:
    async def answer(conn: Conn, head: Head) -> None:
        conn.write(OK_HEAD + b"content-length: 5000\r\n\r\n")  # the length a GET would have
        await conn.writer.drain()

    async with RawServer(keep_serving(answer)) as server:
        for _ in range(2):
            request = UpstreamRequest("HEAD", server.url(), {}, b"")
            resp = await asyncio.wait_for(client.send(request, SLOW_OK, "e"), 30)
            assert resp.status == 200 and resp.headers["content-length"] == "5000"
            assert await asyncio.wait_for(resp.read(), 30) == b""
    assert server.accepted == 1


async def test_trailers_are_consumed_and_the_connection_stays_usable(client: HTTPClient) -> None:
    async def answer(conn: Conn, head: Head) -> None:
        conn.write(OK_HEAD + b"transfer-encoding: chunked\r\ntrailer: x-checksum\r\n\r\n"
                   b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc\r\n\r\n")
        await conn.writer.drain()

    async with RawServer(keep_serving(answer)) as server:
        for stream in (False, True, False):
            resp = await asyncio.wait_for(client.send(post(server.url(), stream=stream), SLOW_OK, "e"), 30)
            if stream:
                body = b"".join([c async for c in resp.chunks()])
                resp.close()
            else:
                body = await asyncio.wait_for(resp.read(), 30)
            assert body == b"hello world"
    assert server.accepted == 1


async def test_garbage_instead_of_http_is_a_provider_error(client: HTTPClient) -> None:
    async with closing(b"SSH-2.0-OpenSSH_9.6\r\n\r\n") as server:
        with pytest.raises(ProviderError):
            await asyncio.wait_for(client.send(post(server.url()), SLOW_OK, "e"), 30)


async def test_a_header_with_a_line_break_is_refused_before_sending(client: HTTPClient) -> None:
    async with RawServer(keep_serving()) as server:
        bad = UpstreamRequest("POST", server.url(), {"x-a": "1\r\nx-injected: 2"}, b"{}")
        with pytest.raises(ProviderConnectError):
            await asyncio.wait_for(client.send(bad, SLOW_OK, "e"), 30)
    assert server.requests == []


@pytest.mark.parametrize("during", ["headers", "body"])
async def test_a_cancelled_request_closes_its_connection(client: HTTPClient, during: str) -> None:
    """The caller left: the upstream must see the connection close, so it stops generating."""
    closed = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.request()
        if during == "body":
            conn.write(OK_HEAD + b"content-length: 100\r\n\r\n" + b"x" * 10)
            await conn.writer.drain()
        await conn.reader.read()  # until the client closes
        closed.set()

    async with RawServer(handler) as server:
        task = asyncio.create_task(client.send(post(server.url()), SLOW_OK, "e"))
        if during == "body":
            resp = await asyncio.wait_for(task, 30)
            task = asyncio.create_task(resp.read())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 10)
