"""`gwctl serve`'s shutdown: one budget (`server.shutdown_timeout_s`), in-flight streams drained
first (a stream that started before the signal ends with [DONE]), then the background work."""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import create_app
from gateway.cli.serve import GatewayServer, close_when_draining, serve, server_config
from gateway.config import load_config
from gateway.runtime import drain_timeout
from kernel.tasks import Deadline, Drain
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


async def test_an_engine_that_does_not_start_ends_serve_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The app's runtime starts the engines in the lifespan: a start that fails is still one
    `gwctl:` line and exit status 2 (uvicorn's own exit for a failed lifespan is replaced)."""
    missing = tmp_path / "missing.gguf"
    settings = load_config(environ={}, server={"port": 0}, engines=[{"name": "local", "model": str(missing)}])
    try:
        assert await serve(settings) == 2
    finally:
        gc.unfreeze()  # serve() froze the test process's objects for its collector
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("gwctl: engine local: ") and err.count(err[-1]) == 1


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


async def test_sigterm_turns_readyz_unready_and_keeps_serving_through_the_drain_delay() -> None:
    """The first SIGTERM: /readyz answers 503 `draining` at once, requests are still accepted and
    answered for `server.drain_delay_s` with `connection: close` (a balancer's pooled connection
    ends cleanly), then the listener closes and the server stops."""
    delay = 1.0
    settings = load_config(
        environ={},
        server={"shutdown_timeout_s": 4, "drain_delay_s": delay},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    deadline, drain = Deadline(settings.server.shutdown_timeout_s), Drain()
    app = create_app(settings, client_factory=lambda: MockHTTPClient(answer), shutdown=deadline, drain=drain)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = GatewayServer(server_config(close_when_draining(app, drain), settings), deadline, drain, delay)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            before = await client.get("/readyz")
            assert before.status_code == 200 and "connection" not in before.headers
            server.handle_exit(signal.SIGTERM, None)
            signalled = time.monotonic()
            ready = await client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "draining"
            assert ready.headers["connection"] == "close"
            # Still accepting new connections and answering them, each closing after its response.
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as fresh:
                resp = await fresh.post("/v1/chat/completions", json=body)
                assert resp.status_code == 200 and resp.text.rstrip().endswith("data: [DONE]")
                assert resp.headers["connection"] == "close"
            assert not serving.done() and not server.should_exit
            async with asyncio.timeout(delay + settings.server.shutdown_timeout_s + 2):
                await serving
        took = time.monotonic() - signalled
        assert delay <= took < delay + settings.server.shutdown_timeout_s
        with pytest.raises(OSError):  # the listener is closed
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        if not serving.done():
            server.force_exit = True
            await serving
        sock.close()


async def test_a_second_signal_cuts_the_drain_delay_short() -> None:
    settings = load_config(
        environ={},
        server={"shutdown_timeout_s": 4, "drain_delay_s": 60},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    deadline, drain = Deadline(settings.server.shutdown_timeout_s), Drain()
    app = create_app(settings, client_factory=lambda: MockHTTPClient(answer), shutdown=deadline, drain=drain)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = GatewayServer(server_config(app, settings), deadline, drain, settings.server.drain_delay_s)
    # uvicorn re-raises a signal it handled once it has stopped (gwctl serve makes that a no-op too).
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.sleep(0.3)
        assert drain.active and not serving.done()
        cut_at = time.monotonic()
        server.handle_exit(signal.SIGTERM, None)
        async with asyncio.timeout(settings.server.shutdown_timeout_s + 2):
            await serving
        assert time.monotonic() - cut_at < settings.server.shutdown_timeout_s
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not serving.done():
            server.force_exit = True
            await serving
        sock.close()

