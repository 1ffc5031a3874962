"""Adapter for upstreams that speak the OpenAI API: Together, Fireworks, DeepInfra, Groq,
OpenRouter, vLLM, SGLang, Ollama, and (with its quirks, see `providers.llamacpp`) llama.cpp.

With ``native: [responses]`` a deployment of these kinds takes `/v1/responses` requests as is
(`NativeAdapter`, `providers.openai_responses`): for upstreams that serve the Responses API themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from kernel.errors import (
    ProviderAuthError,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderServerError,
    ProviderStreamError,
    ProviderTimeout,
)
from kernel.values import Operation, Usage
from providers import openai_responses
from providers.base import ParsedBody, ParsedChunk, StreamTranslator, Target, UpstreamRequest

PATHS: Mapping[str, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
}

# Request fields that steer the gateway and must not reach the upstream.
GATEWAY_ONLY_FIELDS = ("provider",)


class OpenAICompatAdapter:
    # Ask for usage on every stream, so accounting works even when the client did not.
    force_stream_usage = True
    translator_class: type[OpenAIStreamTranslator]

    def build_request(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> UpstreamRequest:
        payload = self.upstream_body(target, op, body, stream)
        headers = {"content-type": "application/json", "accept": "text/event-stream" if stream else "application/json"}
        if target.api_key:
            headers["authorization"] = f"Bearer {target.api_key}"
        if target.extra_headers:
            headers.update(target.extra_headers)
        return UpstreamRequest("POST", target.base_url + PATHS[op], headers, orjson.dumps(payload), stream)

    def upstream_body(self, target: Target, op: Operation, body: dict[str, Any], stream: bool) -> dict[str, Any]:
        payload = dict(body)
        payload["model"] = target.upstream_model
        for name in GATEWAY_ONLY_FIELDS:
            payload.pop(name, None)
        if stream and self.force_stream_usage and op != "embeddings":
            options = dict(payload.get("stream_options") or {})
            options["include_usage"] = True
            payload["stream_options"] = options
        return payload

    def parse_response(
        self, target: Target, op: Operation, body: bytes, request: Mapping[str, Any] | None = None
    ) -> ParsedBody:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ProviderServerError(
                f"upstream {target.endpoint_id} answered with invalid JSON", endpoint=target.endpoint_id
            ) from None
        if not isinstance(obj, dict):
            raise ProviderServerError(
                f"upstream {target.endpoint_id} answered with a non-object JSON body", endpoint=target.endpoint_id
            )
        if obj.get("error") and not obj.get("choices") and not obj.get("data"):
            raise ProviderServerError(
                f"upstream {target.endpoint_id}: {_error_message(obj)}", endpoint=target.endpoint_id
            )
        obj = self.normalise_response(obj, request or {})
        obj["model"] = target.public_model
        return ParsedBody(orjson.dumps(obj), Usage.from_openai(obj.get("usage")))

    def normalise_response(self, obj: dict[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
        """Hook for engines whose answers deviate from OpenAI's (`request`: what was sent)."""
        return obj

    def stream_translator(self, target: Target, op: Operation, body: dict[str, Any]) -> OpenAIStreamTranslator:
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return self.translator_class(target, strip_usage=self.force_stream_usage and not wants_usage)

    def map_error(self, target: Target, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
        return map_http_error(target.endpoint_id, status, headers, body)

    # -- Responses, passed through (providers.base.NativeAdapter) ------------------------------

    native_apis: frozenset[str] = frozenset({openai_responses.RESPONSES})

    def takes_natively(self, api: str, body: Mapping[str, Any]) -> bool:
        return True

    def build_native(
        self, target: Target, api: str, body: Mapping[str, Any], stream: bool, headers: Mapping[str, str]
    ) -> UpstreamRequest:
        own = {"content-type": "application/json"}
        if target.api_key:
            own["authorization"] = f"Bearer {target.api_key}"
        return openai_responses.build_native(target, body, stream, {**own, **target.extra_headers})

    def parse_native(self, target: Target, api: str, body: bytes) -> ParsedBody:
        return openai_responses.parse_native(target, body)

    def native_stream(self, target: Target, api: str, *, prompt_hint: int = 0) -> StreamTranslator:
        return openai_responses.NativeStream(target)


class OpenAIStreamTranslator:
    __slots__ = ("_target", "_strip_usage")

    def __init__(self, target: Target, *, strip_usage: bool) -> None:
        self._target = target
        self._strip_usage = strip_usage

    def feed(self, event: str | None, data: bytes) -> ParsedChunk:
        if data == b"[DONE]":
            return ParsedChunk(done=True)
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProviderStreamError(
                f"upstream {self._target.endpoint_id} sent an invalid stream event", endpoint=self._target.endpoint_id
            ) from None
        if not isinstance(obj, dict):
            raise ProviderStreamError(
                f"upstream {self._target.endpoint_id} sent a non-object stream event",
                endpoint=self._target.endpoint_id,
            )
        if obj.get("error"):
            raise ProviderStreamError(
                f"upstream {self._target.endpoint_id}: {_error_message(obj)}", endpoint=self._target.endpoint_id
            )
        self.normalise_chunk(obj)
        if "model" in obj:
            obj["model"] = self._target.public_model
        usage = Usage.from_openai(obj.get("usage"))
        if self._strip_usage and "usage" in obj:
            del obj["usage"]
            if not obj.get("choices"):
                return ParsedChunk(usage=usage)
        return ParsedChunk([orjson.dumps(obj)], usage)

    def normalise_chunk(self, obj: dict[str, Any]) -> None:
        """Hook for engines whose chunks deviate from OpenAI's."""


def map_http_error(endpoint_id: str, status: int, headers: Mapping[str, str], body: bytes) -> ProviderError:
    """An upstream HTTP error, as the most specific `ProviderError`."""
    message = f"upstream {endpoint_id} returned {status}: {_body_message(body)}"
    common: dict[str, Any] = {"endpoint": endpoint_id, "upstream_status": status}
    if status == 429:
        return ProviderRateLimited(message, retry_after=retry_after_seconds(headers), **common)
    if status in (401, 403):
        return ProviderAuthError(message, **common)
    if status == 408:
        return ProviderTimeout(message, **common)
    if status == 404:
        # The upstream does not know the model or path: our configuration, not the client's request.
        err = ProviderServerError(message, **common)
        err.retryable = False
        return err
    if 400 <= status < 500:
        return ProviderRejected(_body_message(body), status_code=status, **common)
    return ProviderServerError(message, retry_after=retry_after_seconds(headers), **common)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds the upstream asks us to wait; None when it does not say, or says something no one can
    wait (inf, nan, 1e400). Finite values are clamped by the gateway (`retry.max_retry_after_block`)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms):
            return max(0.0, ms / 1000.0)
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": RFC 5322's "zone unknown", which HTTP dates mean as UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _body_message(body: bytes) -> str:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return text.splitlines()[0][:300] if text else "no details"
    return _error_message(obj)


def _error_message(obj: Any) -> str:
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(text := err.get(key), str):
                    return text[:500]
            if isinstance(err.get("detail"), list):
                return orjson.dumps(err["detail"]).decode()[:500]
        if isinstance(err, str):
            return err[:500]
    return orjson.dumps(obj).decode()[:300]


# Engines with deviating chunks subclass the translator and point their adapter at it.
OpenAICompatAdapter.translator_class = OpenAIStreamTranslator
