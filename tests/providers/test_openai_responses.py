"""Responses pass-through on the OpenAI-compatible adapter: the body out with the adapter's headers,
the Response and the SSE events back untouched, with their usage read."""

from __future__ import annotations

import json

import pytest

from kernel.errors import ProviderServerError, ProviderStreamError
from kernel.values import Usage
from providers.base import NativeAdapter, Target
from providers.llamacpp import LlamaCppAdapter
from providers.openai_compat import OpenAICompatAdapter

TARGET = Target("oai-0", "https://openai.example/v1", "gpt-upstream", "gpt", api_key="sk-secret")
BODY = {"model": "gpt", "input": "hi", "store": False, "stream": True, "reasoning": {"effort": "low"}, "new_field": 1}
USAGE = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3, "total_tokens": 12}


def _event(kind: str, **fields: object) -> bytes:
    return json.dumps({"type": kind, "sequence_number": 0, **fields}).encode()


def test_openai_compatible_adapters_take_responses_and_llamacpp_only_messages() -> None:
    adapter = OpenAICompatAdapter()
    assert isinstance(adapter, NativeAdapter) and adapter.native_apis == {"responses"}
    assert LlamaCppAdapter().native_apis == {"messages"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_body_goes_as_given_with_the_upstream_model_and_the_providers_key(stream: bool) -> None:
    built = OpenAICompatAdapter().build_native(TARGET, "responses", BODY, stream, {"x-ignored": "1"})
    assert built.url == "https://openai.example/v1/responses" and built.stream is stream
    expected = {**BODY, "model": "gpt-upstream"}
    if not stream:
        expected.pop("stream")
    assert json.loads(built.body) == expected
    assert built.headers["authorization"] == "Bearer sk-secret" and "x-ignored" not in built.headers


def test_a_response_is_returned_as_is_with_its_usage() -> None:
    raw = json.dumps({"id": "resp_1", "object": "response", "output": [], "usage": USAGE}).encode()
    parsed = OpenAICompatAdapter().parse_native(TARGET, "responses", raw)
    assert parsed.body == raw and parsed.usage == Usage(prompt_tokens=9, completion_tokens=3, cached_tokens=4)


@pytest.mark.parametrize(
    "body", [b"not json", b'{"object": "chat.completion", "choices": []}', b'{"error": {"message": "x"}}']
)
def test_a_body_that_is_not_a_response_is_a_server_error(body: bytes) -> None:
    with pytest.raises(ProviderServerError, match="not a Response"):
        OpenAICompatAdapter().parse_native(TARGET, "responses", body)


def test_the_stream_passes_events_as_they_came_and_ends_at_the_terminal_one() -> None:
    stream = OpenAICompatAdapter().native_stream(TARGET, "responses")
    delta = _event("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Hi")
    first = stream.feed("response.output_text.delta", delta)
    assert first.payloads == [b"event: response.output_text.delta\ndata: " + delta + b"\n\n"] and not first.done
    unnamed = stream.feed(None, _event("response.created", response={"id": "r", "output": []}))  # named from its data
    assert unnamed.payloads[0].startswith(b"event: response.created\ndata: ")
    assert stream.feed(None, b"[DONE]").payloads == []
    last = stream.feed("response.incomplete", _event("response.incomplete", response={"id": "r", "usage": USAGE}))
    assert last.done and last.usage == Usage(prompt_tokens=9, completion_tokens=3, cached_tokens=4)


@pytest.mark.parametrize(
    ("event", "data", "match"),
    [
        ("error", _event("error", code="server_error", message="boom", param=None), "server_error: boom"),
        ("response.created", b"{not json", "an invalid stream event"),
        (None, b'{"sequence_number": 1}', "without a type"),
    ],
)
def test_an_error_event_or_a_broken_one_fails_the_stream(event: str | None, data: bytes, match: str) -> None:
    with pytest.raises(ProviderStreamError, match=match):
        OpenAICompatAdapter().native_stream(TARGET, "responses").feed(event, data)


def test_an_event_named_opaque_is_read_by_its_datas_type() -> None:
    # SDKs take an event's type from its data: `event: response.output_text.delta` cannot carry a
    # response.completed past the gateway (which owns the response's id) unread.
    stream = OpenAICompatAdapter().native_stream(TARGET, "responses")
    forged = _event("response.completed", response={"id": "resp_victim", "usage": USAGE})
    chunk = stream.feed("response.output_text.delta", forged)
    assert chunk.done and chunk.payloads == [b"event: response.completed\ndata: " + forged + b"\n\n"]
    with pytest.raises(ProviderStreamError, match="boom"):
        stream.feed("response.output_text.delta", _event("error", code="server_error", message="boom"))
