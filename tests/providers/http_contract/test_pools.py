"""Pools: many concurrent requests to one origin, the connection limit, idle connections reaped,
and no file descriptor left behind after 10,000 requests that clients abandon at random."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.errors import ProviderError
from providers.http import HTTPClient, Timeouts
from providers.settings import UpstreamLimits
from tests.providers.http_contract.conftest import SLOW_OK, MakeClient, no_env, post
from tests.providers.http_contract.servers import Conn, Head, RawServer, keep_serving

ROOT = Path(__file__).resolve().parents[3]


def delayed(seconds: float) -> RawServer:
    async def answer(conn: Conn, head: Head) -> None:
        await asyncio.sleep(seconds)
        await conn.respond(head.body, headers={"content-type": "application/json"})

    return RawServer(keep_serving(answer))


async def exchange(client: HTTPClient, url: str, i: int) -> bytes:
    resp = await client.send(post(url, {"i": i}), SLOW_OK, "e")
    assert resp.status == 200
    return await resp.read()


async def test_256_concurrent_requests_to_one_origin(client: HTTPClient) -> None:
    async with delayed(0.05) as server:
        bodies = await asyncio.wait_for(asyncio.gather(*(exchange(client, server.url(), i) for i in range(256))), 120)
    assert bodies == [b'{"i":%d}' % i for i in range(256)]
    assert server.max_open <= 256


async def test_the_connection_limit_is_honoured(make_client: MakeClient) -> None:
    client = make_client(no_env(limits=UpstreamLimits(max_connections=4)))
    async with delayed(0.02) as server:
        bodies = await asyncio.wait_for(asyncio.gather(*(exchange(client, server.url(), i) for i in range(40))), 120)
    assert len(bodies) == 40
    assert server.max_open <= 4
    assert server.accepted <= 4


async def test_idle_connections_are_reaped(make_client: MakeClient) -> None:
    client = make_client(no_env(limits=UpstreamLimits(keepalive_seconds=0.3)))
    loop = asyncio.get_running_loop()
    async with delayed(0) as server:
        await asyncio.gather(*(exchange(client, server.url(), i) for i in range(3)))
        assert server.open >= 1  # kept alive at first
        start = loop.time()
        while server.open and loop.time() - start < 10:
            await asyncio.sleep(0.05)
        assert server.open == 0, "idle connections still open after 10 s"
        # ...and the client still works afterwards, on a new connection.
        assert await exchange(client, server.url(), 9) == b'{"i":9}'


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def echo_server() -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.providers.http_contract.echo_server"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


REQUESTS = 10_000
CONCURRENCY = 32


async def test_no_fd_leak_after_10000_requests_with_random_aborts(make_client: MakeClient, echo_server: int) -> None:
    rng = random.Random(15)
    base = f"http://127.0.0.1:{echo_server}"
    timeouts = Timeouts(connect=10.0, first_byte=30.0, between_chunks=30.0, total=60.0)
    before = open_fds()
    client = make_client()
    gate = asyncio.Semaphore(CONCURRENCY)
    outcomes = {"read": 0, "closed": 0, "cancelled": 0, "failed": 0}

    async def one(i: int) -> None:
        kind = rng.choice(["read", "read", "close", "cancel-head", "cancel-body"])
        path = {"cancel-head": "/slow-head", "cancel-body": "/slow-body"}.get(kind, "/fast")
        async with gate:

            async def go() -> None:
                resp = await client.send(post(base + path, {"i": i}), timeouts, "e")
                if kind == "close":
                    resp.close()
                    return
                await resp.read()

            task = asyncio.create_task(go())
            try:
                if kind.startswith("cancel"):
                    await asyncio.sleep(0.005 if kind == "cancel-head" else 0.012)
                    task.cancel()
                await task
                outcomes["closed" if kind == "close" else "read"] += 1
            except asyncio.CancelledError:
                outcomes["cancelled"] += 1
            except ProviderError:
                outcomes["failed"] += 1

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    took = time.perf_counter() - started
    during = open_fds()
    await client.aclose()
    await asyncio.sleep(0.1)  # transports close on the next loop iterations
    after = open_fds()
    print(f"\n{REQUESTS} requests ({outcomes}) in {took:.1f} s; fds {before} -> {during} (pool open) -> {after}")
    assert outcomes["failed"] == 0, outcomes
    assert outcomes["cancelled"] > 0 and outcomes["closed"] > 0
    assert during <= before + CONCURRENCY + 4, "more sockets open than requests ever ran at once"
    assert after <= before, f"{after - before} descriptors leaked"
