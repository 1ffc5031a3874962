"""Messages pass-through for `kind: anthropic` deployments with ``native: [messages]``: a `/v1/messages`
request goes to the upstream as the client sent it, and its answer or SSE events come back as they are,
so nothing the chat translation cannot carry is lost (`cache_control`, thinking and its signatures,
document blocks, fields added to the API later).

Out: the client's body with `model` replaced by the upstream model and `stream` as routed; the headers
the adapter always builds (`x-api-key` from the provider, never the client's key; `anthropic-version`),
the client's `anthropic-beta`, then the provider's own `headers`. Back: the Message or the events,
untouched; usage read from the Message, or from message_start and message_delta, the way the
translation reads it (`providers.anthropic_answer.usage_of`), for accounting, limits and affinity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kernel.errors import ProviderServerError, ProviderStreamError
from providers.anthropic_answer import merge_counts, prompt_usage_of, usage_of
from providers.base import ParsedBody, ParsedChunk, Target, UpstreamRequest, typed_as

MESSAGES = "messages"
# The client's headers that go with its body: the betas it opted into change what the body may hold.
FORWARDED = ("anthropic-beta",)
# Events relayed without being parsed when their data says the same type (`typed_as`): they carry no
# usage and no error (the hot part of a stream).
OPAQUE = frozenset({b"content_block_delta", b"content_block_start", b"content_block_stop", b"ping"})


def native_body(target: Target, body: Mapping[str, Any], stream: bool) -> bytes:
    out = {**body, "model": target.upstream_model}
    if bool(out.get("stream")) != stream:  # only where the caller's choice differs from the body's
        out["stream"] = stream
    return orjson.dumps(out)


def forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: headers[name] for name in FORWARDED if headers.get(name)}


def parse_native(target: Target, body: bytes) -> ParsedBody:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        message = None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        raise ProviderServerError(f"upstream {target.endpoint_id} answered with a body that is not a Message", endpoint=target.endpoint_id)
    return ParsedBody(body, usage_of(message.get("usage")))


class NativeStream:
    """One per stream: each Messages event passed on as it came; usage gathered from message_start
    and message_delta (`usage_of`: a prompt no event counted is not reported as 0); message_stop
    ends it; an `error` event fails it (before the first event the dispatcher may still retry or
    fall back; after it the client gets Anthropic's error event)."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._usage: dict[str, Any] = {}

    def _fail(self, what: str) -> ProviderStreamError:
        return ProviderStreamError(f"upstream {self._target.endpoint_id}: {what}", endpoint=self._target.endpoint_id)

    def feed(self, event: str | None, data: bytes) -> ParsedChunk:
        name = (event or "").encode()
        raw = b"event: " + name + b"\ndata: " + data + b"\n\n"
        if name in OPAQUE and typed_as(name, data):
            return ParsedChunk([raw])
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self._fail("an invalid stream event") from None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if isinstance(kind, str) and kind.encode() != name:  # named only in the data, or named otherwise: the data's wins
            raw = b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
        if kind == "message_start":  # exact for the prompt only: the output is counted until message_delta
            message = obj.get("message")
            merge_counts(self._usage, message.get("usage") if isinstance(message, dict) else None, start=True)
            return ParsedChunk([raw], prompt_usage=prompt_usage_of(self._usage))
        if kind == "message_delta":
            merge_counts(self._usage, obj.get("usage"))
            return ParsedChunk([raw], usage_of(self._usage))
        if kind == "message_stop":
            return ParsedChunk([raw], usage_of(self._usage), done=True)
        if kind == "error":
            error = obj.get("error") or {}
            raise self._fail(f"{error.get('type', 'error')}: {error.get('message', '')}"[:500])
        return ParsedChunk([raw])  # event types added later pass as they are


def build_native(
    target: Target, body: Mapping[str, Any], stream: bool, headers: Mapping[str, str], base: Mapping[str, str]
) -> UpstreamRequest:
    """`base`: the adapter's own headers (auth, version, the provider's); the client's betas go under them."""
    merged = {**base}
    for name, value in forwarded(headers).items():
        merged.setdefault(name, value)
    return UpstreamRequest("POST", target.base_url + "/messages", merged, native_body(target, body, stream), stream)
