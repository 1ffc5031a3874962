"""The OpenAI-compatible adapter: request building, response and stream translation, error mapping."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import orjson
import pytest

from kernel.errors import (
    ProviderAuthError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderServerError,
    ProviderStreamError,
    ProviderTimeout,
)
from kernel.values import Usage
from providers.base import Target
from providers.openai_compat import OpenAICompatAdapter, map_http_error, retry_after_seconds

TARGET = Target(
    endpoint_id="together/llama",
    base_url="https://api.together.test/v1",
    upstream_model="meta-llama/Llama-3-8b",
    public_model="llama",
    api_key="sk-provider",
    extra_headers={"x-extra": "1"},
)
ADAPTER = OpenAICompatAdapter()
CHAT = {"model": "llama", "messages": [{"role": "user", "content": "hi"}]}


def body_of(op: str, body: dict[str, Any], stream: bool = False, target: Target = TARGET) -> dict[str, Any]:
    return orjson.loads(ADAPTER.build_request(target, op, body, stream).body)  # type: ignore[arg-type]


# -- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "path"), [("chat", "/chat/completions"), ("completions", "/completions"), ("embeddings", "/embeddings")]
)
def test_url_per_operation(op: str, path: str) -> None:
    request = ADAPTER.build_request(TARGET, op, {"model": "llama"}, False)  # type: ignore[arg-type]
    assert (request.method, request.url) == ("POST", "https://api.together.test/v1" + path)


def test_headers() -> None:
    request = ADAPTER.build_request(TARGET, "chat", CHAT, True)
    assert request.headers == {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "authorization": "Bearer sk-provider",
        "x-extra": "1",
    }
    assert request.stream is True
    plain = ADAPTER.build_request(Target("e", "http://x/v1", "u", "p"), "chat", CHAT, False)
    assert plain.headers == {"content-type": "application/json", "accept": "application/json"}


def test_model_rewritten_provider_stripped_unknown_fields_kept() -> None:
    original = {**CHAT, "provider": {"order": ["together"]}, "repetition_penalty": 1.1, "top_k": 40}
    snapshot = copy.deepcopy(original)

    sent = body_of("chat", original)

    assert sent["model"] == "meta-llama/Llama-3-8b"
    assert "provider" not in sent
    assert (sent["repetition_penalty"], sent["top_k"]) == (1.1, 40)
    assert sent["messages"] == CHAT["messages"]
    assert original == snapshot  # the client's body is not mutated


def test_stream_forces_include_usage() -> None:
    assert body_of("chat", {**CHAT, "stream": True}, stream=True)["stream_options"] == {"include_usage": True}
    kept = body_of(
        "chat",
        {**CHAT, "stream": True, "stream_options": {"include_usage": False, "continuous_usage_stats": True}},
        stream=True,
    )
    assert kept["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body_of("completions", {"model": "llama", "prompt": "x", "stream": True}, stream=True)["stream_options"] == {
        "include_usage": True
    }


def test_no_stream_options_when_not_streaming() -> None:
    assert "stream_options" not in body_of("chat", CHAT)
    assert "stream_options" not in body_of("embeddings", {"model": "llama", "input": "x"})


# -- responses -------------------------------------------------------------------------------


def test_parse_response_rewrites_model_and_reads_usage() -> None:
    upstream = {
        "id": "x",
        "object": "chat.completion",
        "model": "meta-llama/Llama-3-8b",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hey"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
        "x_vendor": {"kept": True},
    }
    parsed = ADAPTER.parse_response(TARGET, "chat", orjson.dumps(upstream))
    assert orjson.loads(parsed.body) == {**upstream, "model": "llama"}
    assert parsed.usage == Usage(prompt_tokens=9, completion_tokens=2, cached_tokens=4)


@pytest.mark.parametrize(
    "raw",
    [b"<html>502 Bad Gateway</html>", b"[1, 2]", b'{"error": {"message": "model overloaded"}}', b""],
    ids=["html", "array", "error", "empty"],
)
def test_parse_response_garbage_is_a_retryable_server_error(raw: bytes) -> None:
    with pytest.raises(ProviderServerError) as info:
        ADAPTER.parse_response(TARGET, "chat", raw)
    assert info.value.retryable and info.value.fallback
    assert info.value.endpoint == "together/llama"


def test_embeddings_response_passes_through() -> None:
    upstream = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": "AACAPw=="}],
        "model": "u",
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
    parsed = ADAPTER.parse_response(TARGET, "embeddings", orjson.dumps(upstream))
    assert orjson.loads(parsed.body)["data"] == upstream["data"]
    assert orjson.loads(parsed.body)["model"] == "llama"


# -- streams -----------------------------------------------------------------------------------


def chunk(**extra: Any) -> bytes:
    return orjson.dumps({"id": "c", "object": "chat.completion.chunk", "model": "meta-llama/Llama-3-8b", **extra})


DELTA = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
USAGE = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


def test_stream_strips_usage_the_client_did_not_ask_for() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {**CHAT, "stream": True})

    first = translator.feed(None, chunk(**DELTA, usage=None))
    last = translator.feed(None, chunk(choices=[], usage=USAGE))
    done = translator.feed(None, b"[DONE]")

    (payload,) = first.payloads
    assert orjson.loads(payload) == {"id": "c", "object": "chat.completion.chunk", "model": "llama", **DELTA}
    assert last.payloads == [] and last.usage == Usage(3, 1, 0)  # counted, not forwarded
    assert done.done and done.payloads == []


def test_stream_keeps_usage_when_asked() -> None:
    translator = ADAPTER.stream_translator(
        TARGET, "chat", {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    )

    first = translator.feed(None, chunk(**DELTA, usage=None))
    last = translator.feed(None, chunk(choices=[], usage=USAGE))

    assert orjson.loads(first.payloads[0])["usage"] is None
    assert orjson.loads(last.payloads[0]) == {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "llama",
        "choices": [],
        "usage": USAGE,
    }
    assert last.usage == Usage(3, 1, 0)


def test_stream_chunk_with_both_choices_and_usage_keeps_the_choices() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", CHAT)
    parsed = translator.feed(None, chunk(**DELTA, usage=USAGE))
    assert orjson.loads(parsed.payloads[0])["choices"] == DELTA["choices"]
    assert "usage" not in orjson.loads(parsed.payloads[0])
    assert parsed.usage == Usage(3, 1, 0)


@pytest.mark.parametrize(
    "data",
    [b'{"error": {"message": "overloaded", "type": "server_error"}}', b"{not json", b"[1]", b'"text"'],
    ids=["error", "invalid", "array", "string"],
)
def test_stream_errors(data: bytes) -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", CHAT)
    with pytest.raises(ProviderStreamError) as info:
        translator.feed(None, data)
    assert info.value.endpoint == "together/llama"


def test_stream_error_message_is_kept() -> None:
    with pytest.raises(ProviderStreamError) as info:
        ADAPTER.stream_translator(TARGET, "chat", CHAT).feed("error", b'{"error": {"message": "overloaded"}}')
    assert "overloaded" in info.value.message


# -- errors ---------------------------------------------------------------------------------------


def err(status: int, headers: dict[str, str] | None = None, body: bytes | None = None) -> Any:
    if body is None:
        body = orjson.dumps({"error": {"message": f"status {status}", "type": "x", "param": None, "code": None}})
    return ADAPTER.map_error(TARGET, status, headers or {}, body)


@pytest.mark.parametrize("status", [400, 413, 422])
def test_request_errors_pass_through(status: int) -> None:
    e = err(status)
    assert isinstance(e, ProviderRejected)
    assert (e.status_code, e.message, e.upstream_status) == (status, f"status {status}", status)
    assert not e.retryable and not e.fallback and not e.counts_against_endpoint
    assert e.error_type == "invalid_request_error"


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_are_ours(status: int) -> None:
    e = err(status)
    assert isinstance(e, ProviderAuthError)
    assert e.status_code == 502  # the client's key is fine: never a 401 to the client
    assert not e.retryable and e.fallback and e.counts_against_endpoint


def test_404_moves_on_without_retry() -> None:
    e = err(404)
    assert isinstance(e, ProviderServerError) and e.status_code == 502
    assert not e.retryable and e.fallback


def test_408_is_a_timeout() -> None:
    e = err(408)
    assert isinstance(e, ProviderTimeout) and e.retryable and e.status_code == 504


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ],
)
def test_429(headers: dict[str, str], expected: float | None) -> None:
    e = err(429, headers)
    assert isinstance(e, ProviderRateLimited)
    assert e.retry_after == expected
    assert (e.status_code, e.error_type, e.retryable) == (429, "rate_limit_error", True)


def test_429_with_http_date() -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    e = err(429, {"retry-after": format_datetime(when, usegmt=True)})
    assert e.retry_after is not None and 28 <= e.retry_after <= 31


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529])
def test_5xx(status: int) -> None:
    e = err(status, {"retry-after": "2"})
    assert isinstance(e, ProviderServerError) and e.retryable and e.fallback
    assert e.status_code == 502 and e.upstream_status == status
    assert e.retry_after == 2.0
    assert f"returned {status}" in e.message


def test_error_body_shapes() -> None:
    assert (
        err(400, body=b'{"detail": [{"loc": ["body", "n"], "msg": "bad"}]}').message
        == '[{"loc":["body","n"],"msg":"bad"}]'
    )
    assert err(400, body=b'{"error": "plain string"}').message == "plain string"
    assert err(400, body=b'{"message": "top-level"}').message == "top-level"
    assert err(400, body=b"Bad Request\nmore").message == "Bad Request"
    assert err(400, body=b"").message == "no details"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after-ms": "x", "retry-after": "3"}, 3.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        # RFC 5322's "-0000" (no zone known) parses to a naive datetime: read as UTC, not a 500.
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, 0.0),
        # Not a number of seconds anyone can wait: ignored, never an infinite block.
        ({"retry-after": "inf"}, None),
        ({"retry-after": "Infinity"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "1e400"}, None),
        ({"retry-after-ms": "inf"}, None),
        ({"retry-after-ms": "inf", "retry-after": "3"}, 3.0),
        ({"retry-after-ms": "-inf"}, None),
    ],
)
def test_retry_after_seconds(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_a_retry_after_date_without_a_zone_is_read_as_utc() -> None:
    from datetime import datetime, timedelta
    from email.utils import format_datetime

    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True).replace("GMT", "-0000")
    waited = retry_after_seconds({"retry-after": when})
    assert waited is not None and 100 < waited <= 121


def test_map_http_error_names_the_endpoint() -> None:
    e = map_http_error("x/y", 500, {}, b"{}")
    assert e.endpoint == "x/y" and "x/y" in e.message
