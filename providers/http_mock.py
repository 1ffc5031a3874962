"""The fake beside `providers.http`: an in-process HTTP client driven by a handler function.

Like `httpx.MockTransport`: ``MockHTTPClient(handler)`` where ``handler(request)`` returns a
`MockResponse` (or raises a `ProviderError` to simulate a transport failure). A response's
`chunks` may contain an exception instance, raised when the stream reaches it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from providers.base import UpstreamRequest
from providers.http import Timeouts

Handler = Callable[[UpstreamRequest], "MockResponse | Awaitable[MockResponse]"]


@dataclass
class MockResponse:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: Sequence[bytes | BaseException] | None = None
    closed: bool = False

    async def read(self) -> bytes:
        if self.chunks is not None:
            parts = []
            for part in self.chunks:
                if isinstance(part, BaseException):
                    raise part
                parts.append(part)
            return b"".join(parts)
        return self.body

    async def chunks_iter(self) -> AsyncIterator[bytes]:
        for part in self.chunks if self.chunks is not None else [self.body]:
            await asyncio.sleep(0)
            if isinstance(part, BaseException):
                raise part
            yield part

    def close(self) -> None:
        self.closed = True


class _Bound:
    """Adapts a MockResponse to the UpstreamResponse protocol."""

    def __init__(self, response: MockResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.headers.items()}

    async def read(self) -> bytes:
        return await self._response.read()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.chunks_iter()

    def close(self) -> None:
        self._response.close()


class MockHTTPClient:
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[UpstreamRequest] = []
        self.closed = False

    async def send(self, request: UpstreamRequest, timeouts: Timeouts, endpoint_id: str) -> _Bound:
        self.requests.append(request)
        result = self._handler(request)
        if isinstance(result, Awaitable):
            result = await result
        return _Bound(result)

    async def aclose(self) -> None:
        self.closed = True
