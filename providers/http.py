"""The upstream HTTP seam: a small client interface, and its aiohttp implementation.

aiohttp is the default (and only) client because it passed the transport contract suite
(tests/providers/http_contract/) where the hand-written httptools client did not; see the README.
Every aiohttp or socket error is mapped here, at the boundary, to a `ProviderError`; nothing above
sees aiohttp types. `providers.http_mock.MockHTTPClient` is the fake beside it.

Beyond aiohttp's defaults: the decoded body is capped at `upstream.limits.max_response_bytes`
(aiohttp decompresses in bounded steps, so a compression bomb is cut off there), header size and
count are capped, the gap between body chunks is timed for non-streamed bodies too, and a request
whose connection is closed before a byte of answer (a pooled keep-alive connection the upstream
closed) is sent once more on another connection.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import http_exceptions

from kernel.errors import (
    ProviderConnectError,
    ProviderError,
    ProviderResponseTooLarge,
    ProviderStreamError,
    ProviderTimeout,
)
from providers.base import UpstreamRequest
from providers.routes import Routes
from providers.settings import UpstreamConfig


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: connect, first byte (headers), between body chunks, and the whole exchange."""

    connect: float
    first_byte: float
    between_chunks: float
    total: float


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...


class HTTPClient(Protocol):
    async def send(self, request: UpstreamRequest, timeouts: Timeouts, endpoint_id: str) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


class AiohttpClient:
    """One pooled session for every upstream. Create and close it inside the running loop."""

    def __init__(self, upstream: UpstreamConfig = UpstreamConfig(), routes: Routes | None = None) -> None:
        limits = upstream.limits
        self._routes = routes or Routes(upstream)
        self._max_bytes = limits.max_response_bytes
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # by connect timeout
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=limits.keepalive_seconds
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=None),
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
            trust_env=False,  # proxies come from `upstream.proxy`, which read the environment once
            max_line_size=limits.max_header_bytes,
            max_field_size=limits.max_header_bytes,
            max_headers=limits.max_headers,
        )

    async def send(self, request: UpstreamRequest, timeouts: Timeouts, endpoint_id: str) -> UpstreamResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeouts.total
        route = self._routes.for_url(request.url)
        timeout = self._timeouts.get(timeouts.connect)
        if timeout is None:
            timeout = self._timeouts[timeouts.connect] = aiohttp.ClientTimeout(sock_connect=timeouts.connect)
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                for retry in (False, True):
                    try:
                        resp = await self._session.request(
                            request.method,
                            request.url,
                            data=_payload(request.body),
                            headers=request.headers,
                            timeout=timeout,
                            allow_redirects=False,
                            proxy=route.proxy,
                            ssl=route.tls if route.tls is not None else True,
                        )
                        break
                    except aiohttp.ServerDisconnectedError as exc:
                        # Closed cleanly before a single byte of answer: most likely a pooled
                        # keep-alive connection the upstream closed as we reused it. Once more; the
                        # pool drops the closed one. Not after a reset or a partial answer.
                        if retry or not isinstance(exc.message, str):
                            raise
        except TimeoutError as exc:
            raise _timeout(exc, endpoint_id, "waiting for the first byte") from exc
        except aiohttp.ClientResponseError as exc:
            raise _bad_response(exc, endpoint_id) from exc
        except aiohttp.ClientConnectorCertificateError as exc:
            raise ProviderConnectError(
                f"cannot reach upstream {endpoint_id}: TLS certificate refused: {_describe(exc.certificate_error)}",
                endpoint=endpoint_id,
            ) from exc
        except aiohttp.ClientError as exc:
            raise _connect_error(exc, endpoint_id) from exc
        except OSError as exc:
            raise ProviderConnectError(f"cannot reach upstream {endpoint_id}: {exc}", endpoint=endpoint_id) from exc
        except ValueError as exc:  # a header aiohttp will not write (a line break in it): nothing was sent
            raise ProviderConnectError(f"invalid request to upstream {endpoint_id}: {_describe(exc)}", endpoint=endpoint_id) from exc
        return _AiohttpResponse(resp, loop, deadline, timeouts.between_chunks, endpoint_id, self._max_bytes)

    async def aclose(self) -> None:
        await self._session.close()


class _AiohttpResponse:
    __slots__ = ("_resp", "_loop", "_deadline", "_between", "_endpoint", "_max_bytes", "status", "headers")

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        between: float,
        endpoint_id: str,
        max_bytes: int,
    ) -> None:
        self._resp = resp
        self._loop = loop
        self._deadline = deadline
        self._between = between
        self._endpoint = endpoint_id
        self._max_bytes = max_bytes
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers

    def _too_large(self) -> ProviderResponseTooLarge:
        return ProviderResponseTooLarge(
            f"upstream {self._endpoint} answered more than {self._max_bytes} bytes (upstream.limits.max_response_bytes)",
            endpoint=self._endpoint,
        )

    async def read(self) -> bytes:
        resp = self._resp
        length = resp.content_length
        if length is not None and length > self._max_bytes and resp.method != "HEAD" and "content-encoding" not in resp.headers:
            resp.close()
            raise self._too_large()
        try:
            body = await self._read_within_limits()
        except BaseException:
            resp.close()  # on cancellation too: a half-read connection must not outlive us
            raise
        resp.release()
        return body

    async def _read_within_limits(self) -> bytes:
        content = self._resp.content
        if content.is_eof():  # the whole body came with the headers: no wait, no timer
            body = content.read_nowait()
            if len(body) > self._max_bytes:
                raise self._too_large()
            return body
        parts: list[bytes] = []
        size = 0
        loop = self._loop
        try:
            async with asyncio.timeout_at(min(self._deadline, loop.time() + self._between)) as timer:
                while chunk := await content.readany():
                    size += len(chunk)
                    if size > self._max_bytes:
                        raise self._too_large()
                    parts.append(chunk)
                    timer.reschedule(min(self._deadline, loop.time() + self._between))
        except TimeoutError as exc:
            what = "reading the response" if loop.time() >= self._deadline else "waiting for the next chunk"
            raise _timeout(exc, self._endpoint, what) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderConnectError(
                f"upstream {self._endpoint} broke the connection while answering: {_describe(exc)}",
                endpoint=self._endpoint,
            ) from exc
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._resp.content
        loop = self._loop
        size = 0
        while True:
            now = loop.time()
            budget = min(self._between, self._deadline - now)
            try:
                async with asyncio.timeout(budget):
                    chunk = await content.readany()
            except TimeoutError as exc:
                what = "the whole response" if budget < self._between else "the next chunk"
                raise _timeout(exc, self._endpoint, f"waiting for {what}") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise ProviderStreamError(
                    f"upstream {self._endpoint} broke the stream: {_describe(exc)}", endpoint=self._endpoint
                ) from exc
            if not chunk:
                return
            size += len(chunk)
            if size > self._max_bytes:
                self._resp.close()
                raise self._too_large()
            yield chunk

    def close(self) -> None:
        self._resp.close()


def _timeout(exc: BaseException, endpoint_id: str, what: str) -> ProviderError:
    return ProviderTimeout(f"upstream {endpoint_id} timed out {what}", endpoint=endpoint_id)


def _connect_error(exc: aiohttp.ClientError, endpoint_id: str) -> ProviderError:
    return ProviderConnectError(f"cannot reach upstream {endpoint_id}: {_describe(exc)}", endpoint=endpoint_id)


def _bad_response(exc: aiohttp.ClientResponseError, endpoint_id: str) -> ProviderError:
    """The upstream's answer could not be parsed: over a header limit, or not HTTP."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, http_exceptions.LineTooLong) or "Too many headers" in str(cause):
            return ProviderResponseTooLarge(
                f"upstream {endpoint_id} answered headers over the limit (upstream.limits): {_describe(cause)}",
                endpoint=endpoint_id,
            )
        cause = cause.__cause__
    return ProviderConnectError(f"upstream {endpoint_id} sent a malformed answer: {_describe(exc)}", endpoint=endpoint_id)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


# aiohttp warns past 1 MiB of raw bytes (its writer would send them in one go); a BytesIO goes out
# in chunks with the event loop let in between. Made afresh per send: aiohttp closes it when done.
_LARGE_BODY = 1 << 20


def _payload(body: bytes) -> bytes | io.BytesIO | None:
    if not body:
        return None
    return io.BytesIO(body) if len(body) > _LARGE_BODY else body
