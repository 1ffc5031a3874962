"""The provider adapter interface: translation only, no I/O.

An adapter turns an OpenAI-shaped request into an upstream request, and the upstream's answer
(a JSON body, SSE events, or an error) back into OpenAI shape. The HTTP client that carries the
bytes is a separate seam (`providers.http`), so every adapter is testable without a network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from gateway.errors import ProviderError

Operation = Literal["chat", "completions", "embeddings"]


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    stream: bool = False


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # Whether the upstream reported cached tokens at all (0 reported is a miss; absent says nothing).
    cache_reported: bool = field(default=False, compare=False)

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any] | None) -> Usage | None:
        if not usage:
            return None
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        for name in CACHED_TOKEN_FIELDS:
            if cached is None:
                cached = usage.get(name)
        return cls(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(cached or 0),
            cache_reported=cached is not None,
        )


# Where OpenAI-compatible upstreams other than OpenAI put the cached prompt tokens:
# DeepSeek's `prompt_cache_hit_tokens`, Anthropic-style `cache_read_input_tokens`.
CACHED_TOKEN_FIELDS = ("prompt_cache_hit_tokens", "cache_read_input_tokens")


@dataclass(slots=True)
class ParsedBody:
    """A non-streaming answer in OpenAI shape, already serialised for the client."""

    body: bytes
    usage: Usage | None = None


@dataclass(slots=True)
class ParsedChunk:
    """What one upstream SSE event becomes: zero or more client payloads, and flags."""

    payloads: list[bytes] = field(default_factory=list)
    usage: Usage | None = None
    done: bool = False


class StreamTranslator(Protocol):
    """Stateful, one per stream: upstream SSE events in, client `data:` payloads out."""

    def feed(self, event: str | None, data: bytes) -> ParsedChunk: ...


@dataclass(frozen=True, slots=True)
class Target:
    """What an adapter needs to know about the endpoint it talks to."""

    endpoint_id: str
    base_url: str
    upstream_model: str
    public_model: str
    api_key: str | None = None
    extra_headers: Mapping[str, str] = field(default_factory=dict)


class Adapter(Protocol):
    """One per provider kind. Pure functions of their arguments."""

    def build_request(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> UpstreamRequest: ...

    def parse_response(self, target: Target, op: Operation, body: bytes) -> ParsedBody: ...

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> StreamTranslator: ...

    def map_error(
        self, target: Target, status: int, headers: Mapping[str, str], body: bytes
    ) -> ProviderError: ...
