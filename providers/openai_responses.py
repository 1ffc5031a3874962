"""Responses pass-through for OpenAI-compatible deployments with ``native: [responses]``: the upstream
serves `POST /v1/responses` itself, so hosted tools, reasoning items, `include` values and fields
added to the API later reach it as the client sent them.

Out: the body the gateway built from the client's (`gateway.translate.responses_native`: its stored
state expanded, `store: false`), with `model` replaced by the upstream model and `stream` as routed;
the adapter's own headers (the provider's key, never the client's). Back: the Response object or the
SSE events untouched here (the gateway then owns their id, `model` and `store`,
`gateway.pipeline.responses_native`); usage read from `response.usage` for accounting, limits and
affinity. An `error` event fails the stream, as an OpenAI error body fails an answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kernel.errors import ProviderServerError, ProviderStreamError
from kernel.values import Usage
from providers.base import ParsedBody, ParsedChunk, Target, UpstreamRequest, typed_as

RESPONSES = "responses"
# Events that end a Response's stream: each carries the whole response, usage included.
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# Events relayed without being parsed here when their data says the same type (`typed_as`): they
# carry no usage and no error (the hot part of a stream).
OPAQUE = frozenset(
    {
        b"response.output_text.delta",
        b"response.function_call_arguments.delta",
        b"response.reasoning_summary_text.delta",
        b"response.reasoning_text.delta",
        b"response.refusal.delta",
        b"response.output_item.added",
        b"response.output_item.done",
        b"response.content_part.added",
        b"response.content_part.done",
        b"response.output_text.done",
        b"response.function_call_arguments.done",
    }
)


def usage_of(usage: Any) -> Usage | None:
    """Responses usage (input/output tokens, cached input tokens) as the gateway counts it."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("input_tokens_details")
    chat: dict[str, Any] = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
    if isinstance(details, Mapping) and details.get("cached_tokens") is not None:
        chat["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    return Usage.from_openai(chat)


def build_native(target: Target, body: Mapping[str, Any], stream: bool, base: Mapping[str, str]) -> UpstreamRequest:
    out = {**body, "model": target.upstream_model}
    if stream:
        out["stream"] = True
    else:
        out.pop("stream", None)
    headers = {**base, "accept": "text/event-stream" if stream else "application/json"}
    return UpstreamRequest("POST", target.base_url + "/responses", headers, orjson.dumps(out), stream)


def parse_native(target: Target, body: bytes) -> ParsedBody:
    try:
        response = orjson.loads(body)
    except orjson.JSONDecodeError:
        response = None
    if (
        not isinstance(response, dict)
        or response.get("object") != "response"
        or not isinstance(response.get("output"), list)
    ):
        raise ProviderServerError(
            f"upstream {target.endpoint_id} answered with a body that is not a Response", endpoint=target.endpoint_id
        )
    return ParsedBody(body, usage_of(response.get("usage")))


class NativeStream:
    """One per stream: each Responses event passed on as it came (named, should the upstream name it
    only in its data); a terminal event ends it with its usage; an `error` event fails it (before the
    first event the dispatcher may still retry or fall back; after it the client gets an error event)."""

    def __init__(self, target: Target) -> None:
        self._target = target

    def _fail(self, what: str) -> ProviderStreamError:
        return ProviderStreamError(f"upstream {self._target.endpoint_id}: {what}", endpoint=self._target.endpoint_id)

    def feed(self, event: str | None, data: bytes) -> ParsedChunk:
        name = (event or "").encode()
        if name in OPAQUE and typed_as(name, data):
            return ParsedChunk([b"event: " + name + b"\ndata: " + data + b"\n\n"])
        if data.strip() == b"[DONE]":  # some servers end a Responses stream as a chat one
            return ParsedChunk()
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self._fail("an invalid stream event") from None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str):
            raise self._fail("a stream event without a type")
        raw = b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"
        if kind in TERMINAL:
            response = obj.get("response") if isinstance(obj.get("response"), dict) else {}
            return ParsedChunk([raw], usage_of(response.get("usage")), done=True)
        if kind == "error":
            error = obj.get("error") if isinstance(obj.get("error"), dict) else obj
            raise self._fail(f"{error.get('code') or 'error'}: {error.get('message', '')}"[:500])
        return ParsedChunk([raw])  # event types added later pass as they are
