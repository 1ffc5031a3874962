"""Shutdown answers every request it accepted (gateway/cli/quiesce.py), on CPython's loop and on
uvloop (what `gwctl serve` runs on): one still in the listen queue, one accepted but not yet read."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import pytest
import uvicorn
import uvloop

from gateway.cli.quiesce import stop_accepting
from gateway.cli.serve import GatewayServer
from kernel.tasks import Deadline, Drain

RUNNERS = {"asyncio": asyncio.run, "uvloop": uvloop.run}
on_each_loop = pytest.mark.parametrize("run", RUNNERS.values(), ids=RUNNERS.keys())


# A balancer that checks its replicas passively (nginx) keeps sending to one until its connections
# are refused: whatever it sent on a connection the server then drops without an answer is a 502
# (a POST is not retried once sent). Shutdown must answer every request it accepted, including
# one still in the listen queue or accepted but not yet read.
REQUEST = b"GET /ok HTTP/1.1\r\nhost: test\r\n\r\n"


async def ok_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def serving_ok_app() -> tuple[GatewayServer, socket.socket, asyncio.Task[None]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(ok_app, loop="none", http="httptools", lifespan="off", log_level="warning")
    server = GatewayServer(config, Deadline(5), Drain())
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    async with asyncio.timeout(10):
        while not server.started:
            await asyncio.sleep(0.01)
    return server, sock, serving


async def accepted(server: GatewayServer) -> None:
    """Until the server has accepted the connection (nothing sent on it yet)."""
    async with asyncio.timeout(5):
        while not server.server_state.connections:
            await asyncio.sleep(0.001)


def answer_of(client: socket.socket) -> bytes:
    client.settimeout(5)
    got = b""
    try:
        while chunk := client.recv(4096):
            got += chunk
    except ConnectionResetError:
        return got + b"<reset>"
    return got


async def stop(server: GatewayServer, serving: asyncio.Task[None], sock: socket.socket) -> None:
    server.should_exit = True
    async with asyncio.timeout(10):
        await serving
    sock.close()


@on_each_loop
def test_a_connection_still_in_the_listen_queue_at_shutdown_is_answered(run: Any) -> None:
    run(a_connection_still_in_the_listen_queue_at_shutdown_is_answered())


async def a_connection_still_in_the_listen_queue_at_shutdown_is_answered() -> None:
    server, sock, serving = await serving_ok_app()
    # Connected by the kernel and the request sent, before the loop could accept it.
    client = socket.create_connection(sock.getsockname(), timeout=5)
    client.sendall(REQUEST)
    try:
        await server.shutdown()
        got = await asyncio.to_thread(answer_of, client)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"ok"), got
        with pytest.raises(OSError):  # and new connections are refused: a balancer moves on
            socket.create_connection(sock.getsockname(), timeout=1).close()
    finally:
        client.close()
        await stop(server, serving, sock)


@on_each_loop
def test_a_connection_accepted_but_not_yet_read_at_shutdown_is_answered(run: Any) -> None:
    run(a_connection_accepted_but_not_yet_read_at_shutdown_is_answered())


async def a_connection_accepted_but_not_yet_read_at_shutdown_is_answered() -> None:
    server, sock, serving = await serving_ok_app()
    client = socket.create_connection(sock.getsockname(), timeout=5)
    try:
        await accepted(server)
        client.sendall(REQUEST)  # arrives; the loop has not read it when the shutdown begins
        await server.shutdown()
        got = await asyncio.to_thread(answer_of, client)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"ok"), got
    finally:
        client.close()
        await stop(server, serving, sock)


@on_each_loop
def test_an_idle_connection_is_closed_at_shutdown(run: Any) -> None:
    run(an_idle_connection_is_closed_at_shutdown())


async def an_idle_connection_is_closed_at_shutdown() -> None:
    server, sock, serving = await serving_ok_app()
    client = socket.create_connection(sock.getsockname(), timeout=5)
    try:
        client.sendall(REQUEST)
        got = b""
        while not got.endswith(b"ok"):
            got += await asyncio.to_thread(client.recv, 4096)
        began = time.monotonic()
        await server.shutdown()
        assert await asyncio.to_thread(answer_of, client) == b""  # closed cleanly, no reset
        assert time.monotonic() - began < 2.0
    finally:
        client.close()
        await stop(server, serving, sock)


@on_each_loop
def test_a_request_written_just_after_the_shutdown_began_is_answered(run: Any) -> None:
    run(a_request_written_just_after_the_shutdown_began_is_answered())


async def a_request_written_just_after_the_shutdown_began_is_answered() -> None:
    # A balancer connects, then writes: on a busy machine it can be descheduled in between.
    server, sock, serving = await serving_ok_app()
    client = socket.create_connection(sock.getsockname(), timeout=5)
    try:
        await accepted(server)
        writer = threading.Timer(0.05, client.sendall, (REQUEST,))
        writer.start()
        await server.shutdown()
        writer.join()
        got = await asyncio.to_thread(answer_of, client)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"ok"), got
    finally:
        client.close()
        await stop(server, serving, sock)


@on_each_loop
def test_a_connection_that_never_sends_is_waited_for_up_to_the_limit(run: Any) -> None:
    run(a_connection_that_never_sends_is_waited_for_up_to_the_limit())


async def a_connection_that_never_sends_is_waited_for_up_to_the_limit() -> None:
    server, sock, serving = await serving_ok_app()
    client = socket.create_connection(sock.getsockname(), timeout=5)
    try:
        await accepted(server)
        limit = 0.3
        began = asyncio.get_running_loop().time()
        await stop_accepting(server.servers, server.server_state.connections, limit)
        # It waited for a request to come (less uvloop's millisecond clock: 0.3 read 0.29999...).
        assert asyncio.get_running_loop().time() - began >= limit - 0.002
        await server.shutdown()
        assert await asyncio.to_thread(answer_of, client) == b""  # then closed, nothing was sent
    finally:
        client.close()
        await stop(server, serving, sock)
