"""`gwctl serve`'s shutdown: one budget (`server.shutdown_timeout_s`), in-flight streams drained
first (a stream that started before the signal ends with [DONE]), then the background work."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import orjson

from gateway.app import create_app, drain_timeout
from gateway.cli.serve import GatewayServer, server_config
from gateway.config import load_config
from kernel.tasks import Deadline
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse

CHUNKS = 10
GAP = 0.05


class SlowStream(MockResponse):
    async def chunks_iter(self) -> Any:
        for part in self.chunks or []:
            await asyncio.sleep(GAP)
            yield part


def answer(request: UpstreamRequest) -> MockResponse:
    model = orjson.loads(request.body)["model"]
    event = {"id": "x", "object": "chat.completion.chunk", "model": model, "choices": [{"index": 0, "delta": {"content": "w"}}]}
    chunks = [b"data: " + orjson.dumps(event) + b"\n\n" for _ in range(CHUNKS)] + [b"data: [DONE]\n\n"]
    return SlowStream(200, {"content-type": "text/event-stream"}, chunks=chunks)


def test_the_drain_takes_half_the_budget() -> None:
    settings = load_config(environ={})
    assert settings.server.shutdown_timeout_s == 25
    config = server_config(object(), settings)
    assert config.timeout_graceful_shutdown == drain_timeout(settings) == 12.5


async def test_an_in_flight_stream_is_drained_before_the_gateway_stops() -> None:
    settings = load_config(
        environ={},
        server={"shutdown_timeout_s": 6},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    deadline = Deadline(settings.server.shutdown_timeout_s)
    app = create_app(settings, client_factory=lambda: MockHTTPClient(answer), shutdown=deadline)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = GatewayServer(server_config(app, settings), deadline)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        events: list[bytes] = []
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line.encode())
                        if len(events) == 1:
                            stop_at = time.monotonic()
                            server.should_exit = True  # SIGTERM while the stream is in flight
        assert len(events) == CHUNKS + 1 and events[-1] == b"data: [DONE]"  # drained, not cut
        async with asyncio.timeout(settings.server.shutdown_timeout_s + 2):
            await serving
        assert time.monotonic() - stop_at < settings.server.shutdown_timeout_s
    finally:
        if not serving.done():
            server.force_exit = True
            await serving
        sock.close()
