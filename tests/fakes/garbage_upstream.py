"""A hostile upstream: a real aiohttp server on loopback that answers each request with whatever
`Garbage` it is told to (bad JSON, huge numbers, wrong types, truncated SSE, non-finite
Retry-After, resets, stalls). Requests are answered with ``upstream.answer`` at the time they arrive;
None answers a well-formed chat completion."""

from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass, field

from aiohttp import web

VALID_ANSWER = (
    b'{"id":"chatcmpl-ok","object":"chat.completion","created":1,"model":"x","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
)


@dataclass(frozen=True)
class Garbage:
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    # The body, sent in these pieces (one write each); `close` hangs up after them (no clean end).
    pieces: tuple[bytes, ...] = ()
    close: bool = False
    reset: bool = False  # a TCP reset before any answer
    stall: float = 0.0  # seconds to wait before the first byte
    stall_after: float = 0.0  # seconds to wait after the first piece
    extra: dict[str, str] = field(default_factory=dict, compare=False)


class GarbageUpstream:
    def __init__(self) -> None:
        self.answer: Garbage | None = None
        self.requests = 0
        self.hangups = 0  # answers cut short by the client going away
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> GarbageUpstream:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        await request.read()
        g = self.answer
        if g is None:
            return web.Response(body=VALID_ANSWER, content_type="application/json")
        if g.reset:
            _reset(request)
            return web.Response()
        if g.stall:
            await asyncio.sleep(g.stall)
        resp = web.StreamResponse(status=g.status)
        for name, value in g.headers:
            resp.headers[name] = value
        try:
            await self._send(request, resp, g)
        except ConnectionResetError:
            # The gateway hung up mid-answer, as it should on garbage (a timeout, a body too large,
            # a broken stream). aiohttp cancels the handler when it reads the hang-up, but a write
            # due in the same loop round comes first and raises: the answer ends here, quietly.
            self.hangups += 1
        return resp

    async def _send(self, request: web.Request, resp: web.StreamResponse, g: Garbage) -> None:
        await resp.prepare(request)
        for i, piece in enumerate(g.pieces):
            await resp.write(piece)
            if i == 0 and g.stall_after:
                await asyncio.sleep(g.stall_after)
        if g.close:
            if request.transport is not None:
                request.transport.close()
            return
        await resp.write_eof()


def _reset(request: web.Request) -> None:
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()
