"""The provider adapter interface: translation only, no I/O.

An adapter turns an OpenAI-shaped request into an upstream request, and the upstream's answer
(a JSON body, SSE events, or an error) back into OpenAI shape. The HTTP client that carries the
bytes is a separate seam (`providers.http`), so every adapter is testable without a network.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from kernel.errors import ProviderError

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
        """The upstream's claim, validated: a count that is not a non-negative number counts 0, one
        past `MAX_USAGE_TOKENS` counts that much (it feeds rate limits, costs and the shared store)."""
        if not usage or not isinstance(usage, Mapping):
            return None
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        for name in CACHED_TOKEN_FIELDS:
            if cached is None:
                cached = usage.get(name)
        return cls(
            prompt_tokens=token_count(usage.get("prompt_tokens")),
            completion_tokens=token_count(usage.get("completion_tokens")),
            cached_tokens=token_count(cached),
            cache_reported=cached is not None,
        )


# No request uses a billion tokens; an upstream claiming more is clamped here (a store's integer
# counters, and costs, stay sane).
MAX_USAGE_TOKENS = 1_000_000_000


def token_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return 0
    return MAX_USAGE_TOKENS if value >= MAX_USAGE_TOKENS else int(value)


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
