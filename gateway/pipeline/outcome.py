"""What one attempt at an upstream comes back as: a whole body, or a stream under way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.catalog import Endpoint
from providers.base import ParsedChunk
from providers.http import UpstreamResponse


@dataclass(slots=True)
class Completed:
    body: bytes
    # The upstream's answer in the client's own API (`gateway.pipeline.native`): sent as is.
    native: bool = False


@dataclass(slots=True)
class Streaming:
    endpoint: Endpoint
    first: list[bytes]
    rest: AsyncIterator[ParsedChunk]
    done: bool
    response: UpstreamResponse
    # The upstream's events in the client's own API: relayed as is.
    native: bool = False
