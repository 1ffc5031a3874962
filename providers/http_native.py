"""A small keep-alive HTTP/1.1 client on asyncio protocols and httptools' parser.

The gateway's default upstream client: it does only what a JSON/SSE exchange with an upstream
needs (one request, one response, keep-alive pooling per origin, TLS, chunked or sized bodies,
gzip/deflate), and costs about half the CPU per request of aiohttp's general-purpose client
(see bench/overhead.py). Timeouts are timer handles on the loop, not a task or context manager
per read. A pooled connection the server closed while idle is skipped, never reused; a request is
never sent twice here (retries are the dispatcher's decision). Every failure becomes a
`ProviderError` here.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httptools

from gateway.errors import ProviderConnectError, ProviderError, ProviderStreamError, ProviderTimeout
from providers.base import UpstreamRequest
from providers.http import Timeouts

_PAUSE_AT = 1 << 20  # buffered response bytes before reading from the socket pauses
_Origin = tuple[str, str, int]  # scheme, host, port


class Headers(dict[str, str]):
    """Response headers with lower-case names; lookups ignore case."""

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


class _Expired(Exception):
    """A timer fired before the awaited event."""


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(_Expired())


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; carries one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers = Headers()
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._decoder: zlib._Decompress | None = None  # type: ignore[name-defined]

    # --- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionError("unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP response: {exc}"))

    def eof_received(self) -> bool:
        # A body delimited by the connection's end finishes here.
        if self.headers_done and not self.complete:
            try:
                self._parser.feed_data(b"")
            except httptools.HttpParserError:
                pass
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if not self.complete:
            self._fail(exc or ConnectionError("connection closed by the upstream"))

    # --- httptools callbacks ------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        old = dict.get(self.headers, key)
        dict.__setitem__(self.headers, key, f"{old}, {text}" if old is not None else text)

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.headers_done = True
        encoding = dict.get(self.headers, "content-encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj()
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._decoder is not None:
            body = self._decoder.decompress(body)
            if not body:
                return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self.chunks.append(tail)
        self.keep_alive = self._parser.should_keep_alive()  # reset once the next message starts
        self.complete = True
        self._wake()

    # --- exchange -----------------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def start(self, head: bytes, body: bytes) -> None:
        self._reset()
        assert self.transport is not None
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)

    async def wait(self, deadline: float) -> None:
        """Until more happens (headers, a body chunk, the end, an error) or the deadline."""
        loop = self._loop
        waiter = self._waiter = loop.create_future()
        timer = loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and self.error is None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class NativeClient:
    """Pooled keep-alive connections per origin. Create and close it inside the running loop."""

    def __init__(self, *, max_connections: int = 0, keepalive_seconds: float = 30.0) -> None:
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._keepalive = keepalive_seconds
        self._limit = asyncio.Semaphore(max_connections) if max_connections > 0 else None
        self._ssl: ssl.SSLContext | None = None
        self._targets: dict[str, tuple[_Origin, bytes]] = {}
        self._closed = False

    async def send(self, request: UpstreamRequest, timeouts: Timeouts, endpoint_id: str) -> NativeResponse:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeouts.total
        first_byte = min(start + timeouts.first_byte, deadline)
        origin, head = self._head(request)
        if self._limit is not None:
            await self._limit.acquire()
        try:
            conn = self._pooled(origin)
            if conn is None:
                conn = await self._connect(loop, origin, timeouts.connect, endpoint_id)
            try:
                conn.start(head, request.body)
                while not conn.headers_done and conn.error is None:
                    await conn.wait(first_byte)
            except _Expired as exc:
                conn.close()
                raise _timeout(exc, endpoint_id, "waiting for the first byte") from None
            except BaseException:  # cancelled (the client left): closing stops the upstream's work
                conn.close()
                raise
            if conn.error is not None:
                conn.close()
                raise ProviderConnectError(
                    f"cannot reach upstream {endpoint_id}: {_describe(conn.error)}", endpoint=endpoint_id
                )
            return NativeResponse(self, origin, conn, deadline, timeouts.between_chunks, endpoint_id)
        except BaseException:
            if self._limit is not None:
                self._limit.release()
            raise

    def _head(self, request: UpstreamRequest) -> tuple[_Origin, bytes]:
        target = self._targets.get(request.url)
        if target is None:
            parts = urlsplit(request.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ProviderConnectError(f"unsupported upstream URL {request.url!r}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            default = (parts.scheme == "https" and port == 443) or (parts.scheme == "http" and port == 80)
            host = parts.hostname if default else f"{parts.hostname}:{port}"
            if ":" in parts.hostname and not default:  # IPv6 literal
                host = f"[{parts.hostname}]:{port}"
            target = ((parts.scheme, parts.hostname, port), f"{path} HTTP/1.1\r\nhost: {host}\r\n".encode("latin-1"))
            if len(self._targets) < 1024:
                self._targets[request.url] = target
        origin, line = target
        lines = [request.method.encode("ascii"), b" ", line]
        for name, value in request.headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ProviderConnectError(f"header {name!r} holds a line break")
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        lines.append(b"content-length: %d\r\n\r\n" % len(request.body))
        return origin, b"".join(lines)

    def _pooled(self, origin: _Origin) -> _Connection | None:
        """The most recently used idle connection the server has not closed (its FIN arrives
        while the connection sits idle, so a closed one is seen here and skipped)."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive:
                return conn
            conn.close()
        return None

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, origin: _Origin, timeout: float, endpoint_id: str
    ) -> _Connection:
        scheme, host, port = origin
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop), host, port, ssl=context, server_hostname=host if context else None
                )
        except TimeoutError as exc:
            raise _timeout(exc, endpoint_id, "connecting") from None
        except (OSError, ssl.SSLError) as exc:
            raise ProviderConnectError(f"cannot reach upstream {endpoint_id}: {_describe(exc)}", endpoint=endpoint_id) from None
        return conn

    def release(self, origin: _Origin, conn: _Connection) -> None:
        if self._limit is not None:
            self._limit.release()
        if conn.reusable() and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        await asyncio.sleep(0)


class NativeResponse:
    __slots__ = ("_client", "_origin", "_conn", "_deadline", "_between", "_endpoint", "_released", "status", "headers")

    def __init__(
        self,
        client: NativeClient,
        origin: _Origin,
        conn: _Connection,
        deadline: float,
        between: float,
        endpoint_id: str,
    ) -> None:
        self._client = client
        self._origin = origin
        self._conn = conn
        self._deadline = deadline
        self._between = between
        self._endpoint = endpoint_id
        self._released = False
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers

    async def read(self) -> bytes:
        conn = self._conn
        try:
            while not conn.complete and conn.error is None:
                await conn.wait(self._deadline)
        except _Expired as exc:
            self._release(broken=True)
            raise _timeout(exc, self._endpoint, "reading the response") from None
        except BaseException:  # cancelled mid-body
            self._release(broken=True)
            raise
        if conn.error is not None:
            self._release(broken=True)
            raise ProviderConnectError(
                f"upstream {self._endpoint} broke the connection while answering: {_describe(conn.error)}",
                endpoint=self._endpoint,
            )
        body = conn.take()
        self._release()
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        loop = conn._loop
        try:
            while True:
                if conn.chunks:
                    yield conn.take()
                    continue
                if conn.error is not None:
                    raise ProviderStreamError(
                        f"upstream {self._endpoint} broke the stream: {_describe(conn.error)}", endpoint=self._endpoint
                    )
                if conn.complete:
                    return
                between = loop.time() + self._between
                deadline = min(between, self._deadline)
                try:
                    await conn.wait(deadline)
                except _Expired:
                    what = "the whole response" if deadline < between else "the next chunk"
                    raise ProviderTimeout(
                        f"upstream {self._endpoint} timed out waiting for {what}", endpoint=self._endpoint
                    ) from None
        finally:
            self._release(broken=not conn.complete or bool(conn.chunks))

    def _release(self, broken: bool = False) -> None:
        if self._released:
            return
        self._released = True
        if broken:
            self._conn.close()
        self._client.release(self._origin, self._conn)

    def close(self) -> None:
        self._release(broken=not self._conn.complete)


def _timeout(exc: BaseException | None, endpoint_id: str, what: str) -> ProviderError:
    return ProviderTimeout(f"upstream {endpoint_id} timed out {what}", endpoint=endpoint_id)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
