"""The upstream HTTP seam: a small client interface, and its aiohttp implementation.

Chosen by measurement for the hot path (see bench/): aiohttp's pooled client costs about a
tenth of the CPU per request of plain httpx under concurrency. Every aiohttp or socket error is
mapped here, at the boundary, to a `ProviderError`; nothing above sees aiohttp types.
`providers.http_mock.MockHTTPClient` is the fake beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from gateway.errors import ProviderConnectError, ProviderError, ProviderStreamError, ProviderTimeout
from providers.base import UpstreamRequest


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

    def __init__(self, *, max_connections: int = 0, keepalive_seconds: float = 30.0) -> None:
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=keepalive_seconds
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=None),
            skip_auto_headers=("User-Agent",),
            auto_decompress=True,
        )

    async def send(self, request: UpstreamRequest, timeouts: Timeouts, endpoint_id: str) -> UpstreamResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeouts.total
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                resp = await self._session.request(
                    request.method,
                    request.url,
                    data=request.body or None,
                    headers=dict(request.headers),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect, sock_read=None),
                    allow_redirects=False,
                )
        except TimeoutError as exc:
            raise _timeout(exc, endpoint_id, "waiting for the first byte") from exc
        except aiohttp.ClientError as exc:
            raise _connect_error(exc, endpoint_id) from exc
        except OSError as exc:
            raise ProviderConnectError(f"cannot reach upstream {endpoint_id}: {exc}", endpoint=endpoint_id) from exc
        return _AiohttpResponse(resp, loop, deadline, timeouts.between_chunks, endpoint_id)

    async def aclose(self) -> None:
        await self._session.close()


class _AiohttpResponse:
    __slots__ = ("_resp", "_loop", "_deadline", "_between", "_endpoint", "status", "headers")

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        loop: asyncio.AbstractEventLoop,
        deadline: float,
        between: float,
        endpoint_id: str,
    ) -> None:
        self._resp = resp
        self._loop = loop
        self._deadline = deadline
        self._between = between
        self._endpoint = endpoint_id
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers

    async def read(self) -> bytes:
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._resp.read()
        except TimeoutError as exc:
            raise _timeout(exc, self._endpoint, "reading the response") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderConnectError(
                f"upstream {self._endpoint} broke the connection while answering: {_describe(exc)}",
                endpoint=self._endpoint,
            ) from exc
        finally:
            self._resp.release()

    async def chunks(self) -> AsyncIterator[bytes]:
        content = self._resp.content
        loop = self._loop
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
            yield chunk

    def close(self) -> None:
        self._resp.close()


def _timeout(exc: BaseException, endpoint_id: str, what: str) -> ProviderError:
    return ProviderTimeout(f"upstream {endpoint_id} timed out {what}", endpoint=endpoint_id)


def _connect_error(exc: aiohttp.ClientError, endpoint_id: str) -> ProviderError:
    return ProviderConnectError(f"cannot reach upstream {endpoint_id}: {_describe(exc)}", endpoint=endpoint_id)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
