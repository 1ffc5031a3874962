"""Real loopback servers for the transport contract suite: a raw HTTP/1.1 server whose handler
writes exact bytes (so a test can close mid-header, mid-chunk, stall, send trailers or 100 Continue),
a CONNECT/forwarding proxy with Basic auth that records what it saw, and trustme TLS contexts."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field


@dataclass
class Head:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""


class Conn:
    """One accepted connection: read request heads, write raw bytes."""

    def __init__(self, server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.index = index  # 0 for the server's first connection
        self.served = 0

    async def request(self) -> Head | None:
        """The next request on this connection, or None when the client closed it."""
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        lines = raw.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        head = Head(method, target, headers, body)
        self.server.requests.append(head)
        return head

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def respond(
        self,
        body: bytes = b"",
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        chunked: bool = False,
        chunk_size: int = 65536,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {'OK' if status < 300 else 'X'}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        lines.append("transfer-encoding: chunked" if chunked else f"content-length: {len(body)}")
        self.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not chunked:
            self.write(body)
        else:
            for i in range(0, len(body), chunk_size):
                part = body[i : i + chunk_size]
                self.write(b"%x\r\n%s\r\n" % (len(part), part))
                if i % (16 * chunk_size) == 0:
                    await self.writer.drain()
            self.write(b"0\r\n\r\n")
        await self.writer.drain()
        self.served += 1

    async def serve_forever(self, answer: Callable[[Conn, Head], Awaitable[None]]) -> None:
        while (head := await self.request()) is not None:
            await answer(self, head)

    def close(self) -> None:
        self.writer.close()


Handler = Callable[[Conn], Awaitable[None]]


class RawServer:
    """A loopback HTTP/1.1 server; `handler(conn)` owns each accepted connection."""

    def __init__(self, handler: Handler, *, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self._handler = handler
        self._tls = tls
        self._host = host
        self.requests: list[Head] = []
        self.accepted = 0
        self.open = 0
        self.max_open = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def url(self, path: str = "/v1/x", host: str | None = None) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{host or self._host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:  # accepted just before shutdown: its task starts after the others were cancelled
            writer.close()
            return
        index = self.accepted
        self.accepted += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handler(Conn(self, reader, writer, index))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            # Our own shutdown: end normally, as asyncio (3.11) logs a cancelled connection task's
            # CancelledError as "Exception in callback". Any other cancellation propagates.
            if not self._closing:
                raise
        finally:
            self._tasks.discard(task)
            self.open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, self._host, 0, ssl=self._tls, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._closing = True
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


async def answer_ok(conn: Conn, head: Head) -> None:
    await conn.respond(b'{"ok": true}', headers={"content-type": "application/json"})


def keep_serving(answer: Callable[[Conn, Head], Awaitable[None]] = answer_ok) -> Handler:
    async def handler(conn: Conn) -> None:
        await conn.serve_forever(answer)

    return handler


@dataclass
class ProxyLog:
    heads: list[bytes] = field(default_factory=list)  # request heads the proxy parsed (plaintext)
    seen: bytearray = field(default_factory=bytearray)  # every byte from clients, tunnels included
    refused: int = 0  # 407s sent


class ConnectProxy:
    """An HTTP proxy on loopback: CONNECT tunnels for https, absolute-form forwarding for http.
    `hosts` maps names only the proxy can resolve (like a corporate proxy's DNS) to addresses."""

    def __init__(self, *, auth: tuple[str, str] | None = None, hosts: Mapping[str, str] | None = None) -> None:
        self._auth = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else None
        self._hosts = dict(hosts or {})
        self.log = ProxyLog()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def url(self, credentials: tuple[str, str] | None = None) -> str:
        userinfo = f"{credentials[0]}:{credentials[1]}@" if credentials else ""
        return f"http://{userinfo}127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bool) -> None:
        try:
            while data := await reader.read(65536):
                if record:
                    self.log.seen += data
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.log.heads.append(head)
            self.log.seen += head
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            if self._auth is not None and headers.get("proxy-authorization") != self._auth:
                self.log.refused += 1
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                             b"proxy-authenticate: Basic realm=\"test\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                await writer.drain()
                return
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(self._hosts.get(host, host), int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                rest = b""
            else:  # absolute-form: http://host:port/path
                rest_of_url = target.split("://", 1)[1]
                authority, _, path = rest_of_url.partition("/")
                host, _, port = authority.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(self._hosts.get(host, host), int(port or 80))
                kept = [line for line in lines[1:] if line and not line.lower().startswith("proxy-authorization")]
                rest = (f"{method} /{path} HTTP/1.1\r\n" + "\r\n".join(kept) + "\r\n\r\n").encode("latin-1")
            up_writer.write(rest)
            await asyncio.gather(self._pipe(reader, up_writer, True), self._pipe(up_reader, writer, False))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            if not self._closing:  # see RawServer._serve
                raise
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._closing = True
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()
