"""The provider adapter interface: translation only, no I/O.

An adapter turns an OpenAI-shaped request into an upstream request, and the upstream's answer
(a JSON body, SSE events, or an error) back into OpenAI shape. The HTTP client that carries the
bytes is a separate seam (`providers.http`), so every adapter is testable without a network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kernel.errors import ProviderError
from kernel.values import Operation, Usage


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes
    stream: bool = False


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
    # The prompt's exact count, sent before the output's (Messages' message_start): not yet the
    # request's usage, but what an estimate takes for the prompt should the final usage never come.
    prompt_usage: Usage | None = None


class StreamTranslator(Protocol):
    """Stateful, one per stream: upstream SSE events in, client `data:` payloads out."""

    def feed(self, event: str | None, data: bytes) -> ParsedChunk: ...


def typed_as(name: bytes, data: bytes) -> bool:
    """Whether an event's data says the type its `event:` name says, read from its first bytes
    (`{"type":"<name>"`, as the upstreams write it): SDKs go by the data's type, so only such an
    event may pass unparsed (`NativeAdapter`); any other is parsed and read by its data."""
    if not name:
        return False
    quoted = b'"' + name + b'"'
    return data.startswith(b'{"type":' + quoted) or data.startswith(b'{"type": ' + quoted)


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

    def parse_response(
        self, target: Target, op: Operation, body: bytes, request: Mapping[str, Any] | None = None
    ) -> ParsedBody:
        """`request`: the body that was sent, for engines whose answers must be held to it."""
        ...

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> StreamTranslator: ...

    def map_error(
        self, target: Target, status: int, headers: Mapping[str, str], body: bytes
    ) -> ProviderError: ...


@runtime_checkable
class PromptCounting(Protocol):
    """An adapter whose upstream counts a chat prompt as its model sees it (its tokenizer and chat
    template), in one request or several. `count_step` gets the chat body, the step (0, 1, ...) and
    the previous step's answer (None at step 0), and returns the next request to send or the count;
    an answer it cannot read raises a `ProviderError`."""

    def count_step(self, target: Target, body: dict[str, Any], step: int, answer: bytes | None) -> UpstreamRequest | int: ...


@runtime_checkable
class NativeAdapter(Protocol):
    """An adapter whose upstream speaks a client API itself (`native_apis`: Anthropic's Messages, OpenAI's Responses):
    for deployments that list that API as `native`, the client's own body goes out as is (model
    replaced, the adapter's auth and version headers, `headers` the client sent that the adapter
    forwards) and the answer or SSE events come back as is, with their usage read on the way."""

    native_apis: frozenset[str]

    def takes_natively(self, api: str, body: Mapping[str, Any]) -> bool:
        """Whether this body may go as is: an adapter declines one whose meaning its upstream would
        not keep (then it is translated, or, if it cannot be, refused)."""
        ...

    def build_native(
        self, target: Target, api: str, body: Mapping[str, Any], stream: bool, headers: Mapping[str, str]
    ) -> UpstreamRequest: ...

    def parse_native(self, target: Target, api: str, body: bytes) -> ParsedBody: ...

    def native_stream(self, target: Target, api: str, *, prompt_hint: int = 0) -> StreamTranslator:
        """Events in, the same events out (`ParsedChunk.payloads` hold whole SSE events).
        `prompt_hint`: the gateway's estimate of the prompt, for an event the adapter must write
        itself where its upstream left one out (never read as the upstream's count)."""
        ...
