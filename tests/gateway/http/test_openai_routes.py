"""The inference route over real sockets: a client that hangs up on a non-streaming request cancels
the upstream work it started (fanned-out `n` included), and `n` past a deployment's fan-out limit
is a 400 that never reaches the upstream."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import load_config
from tests.fakes.servers import BackgroundLoop, GatewayServer

HANG = 30.0  # the upstream never answers in a test's lifetime


class HangingUpstream:
    """Counts chat requests and the ones cancelled because the caller hung up; answers none."""

    def __init__(self) -> None:
        self.arrived = 0
        self.cancelled = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrived += 1
        try:
            await asyncio.sleep(HANG)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return web.json_response({})

    async def start(self) -> HangingUpstream:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
def served() -> Iterator[tuple[GatewayServer, HangingUpstream]]:
    loop = BackgroundLoop().start()
    upstream = loop.call(HangingUpstream().start())
    settings = load_config(
        environ={},
        providers=[{"name": "up", "base_url": upstream.url}],
        deployments=[
            {"model": "one", "provider": "up", "capabilities": {"native_n": False}},
        ],
        timeouts={"first_byte": HANG * 2, "total": HANG * 2},
        retry={"attempts_per_endpoint": 1, "max_attempts": 1},
    )
    server = GatewayServer(create_app(settings), loop).start()
    try:
        yield server, upstream
    finally:
        server.stop()
        loop.call(upstream.stop())
        loop.stop()


def raw_request(port: int, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("n", [1, 4])
def test_a_client_that_hangs_up_cancels_non_streaming_upstream_work(
    served: tuple[GatewayServer, HangingUpstream], n: int
) -> None:
    server, upstream = served
    sock = raw_request(server.port, {"model": "one", "messages": [{"role": "user", "content": "hi"}], "n": n})
    wait_until(lambda: upstream.arrived == 1)
    sock.close()  # the client leaves while the first (or only) upstream request runs
    wait_until(lambda: upstream.cancelled == 1)
    time.sleep(0.3)  # time for a fan-out to send its next part, if it (wrongly) went on
    assert (upstream.arrived, upstream.cancelled) == (1, 1)
    with httpx.Client(base_url=server.root) as http:
        metrics = http.get("/metrics").text
    gone = [ln for ln in metrics.splitlines() if ln.startswith("gateway_request_errors_total{") and "ClientDisconnected" in ln]
    assert len(gone) == 1 and gone[0].endswith(" 1.0")  # accounted once


def test_n_past_the_fan_out_limit_is_a_400_that_never_reaches_the_upstream(
    served: tuple[GatewayServer, HangingUpstream],
) -> None:
    server, upstream = served
    with httpx.Client(base_url=server.root, timeout=5) as http:
        body = {"model": "one", "messages": [{"role": "user", "content": "hi"}], "n": 128}
        r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "n" and "limit of 8" in r.json()["error"]["message"]
    assert upstream.arrived == 0
