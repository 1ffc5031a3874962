"""Messages pass-through on the Anthropic adapter: the client's body out with the adapter's headers,
the Message and the SSE events back untouched, with their usage read."""

from __future__ import annotations

import json

import pytest

from kernel.errors import ProviderServerError, ProviderStreamError
from providers.anthropic import API_VERSION, AnthropicAdapter
from providers.base import NativeAdapter, Target

TARGET = Target("anth-0", "https://anthropic.example/v1", "claude-upstream", "claude", api_key="sk-ant-secret")
BODY = {
    "model": "claude",
    "max_tokens": 16,
    "stream": True,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": "hi"}],
    "some_new_field": {"x": 1},
}
USAGE = {"input_tokens": 5, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 2, "output_tokens": 1}


def test_the_adapter_takes_messages_natively() -> None:
    adapter = AnthropicAdapter()
    assert isinstance(adapter, NativeAdapter) and adapter.native_apis == {"messages"}


@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_body_goes_as_is_with_the_adapters_headers(stream: bool) -> None:
    client_headers = {"anthropic-beta": "b1,b2", "x-api-key": "sk-client-key"}  # only the betas are forwarded
    request = AnthropicAdapter().build_native(TARGET, "messages", BODY, stream, client_headers)
    assert request.url == "https://anthropic.example/v1/messages" and request.stream is stream
    expected = {**BODY, "model": "claude-upstream", "stream": stream}
    assert json.loads(request.body) == expected
    assert request.headers["x-api-key"] == "sk-ant-secret" and request.headers["anthropic-version"] == API_VERSION
    assert request.headers["anthropic-beta"] == "b1,b2"


def test_the_providers_own_headers_win_over_the_clients_betas() -> None:
    target = Target("anth-0", "https://a.example/v1", "u", "claude", api_key="k", extra_headers={"anthropic-beta": "ours"})
    request = AnthropicAdapter().build_native(target, "messages", BODY, False, {"anthropic-beta": "theirs"})
    assert request.headers["anthropic-beta"] == "ours"


def test_a_message_is_returned_as_is_with_its_usage() -> None:
    raw = json.dumps({"id": "msg_1", "type": "message", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}], "usage": USAGE}).encode()
    parsed = AnthropicAdapter().parse_native(TARGET, "messages", raw)
    assert parsed.body == raw
    assert parsed.usage is not None
    assert (parsed.usage.prompt_tokens, parsed.usage.cached_tokens, parsed.usage.completion_tokens) == (14, 7, 1)
    with pytest.raises(ProviderServerError):
        AnthropicAdapter().parse_native(TARGET, "messages", b'{"type": "error"}')


def test_events_pass_unchanged_and_usage_is_gathered() -> None:
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    start = json.dumps({"type": "message_start", "message": {"id": "msg_1", "usage": USAGE}}).encode()
    delta = b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}}'
    end = b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}'
    first = stream.feed("message_start", start)
    assert first.payloads == [b"event: message_start\ndata: " + start + b"\n\n"] and not first.done
    # The prompt's count only: the output is not known (nor charged) before message_delta.
    assert first.usage is None and first.prompt_usage is not None
    assert (first.prompt_usage.prompt_tokens, first.prompt_usage.completion_tokens) == (14, 0)
    assert stream.feed("content_block_delta", delta).payloads == [b"event: content_block_delta\ndata: " + delta + b"\n\n"]
    assert stream.feed(None, b'{"type":"ping"}').payloads == [b'event: ping\ndata: {"type":"ping"}\n\n']  # named from its type
    assert stream.feed("message_delta", end).usage is not None
    last = stream.feed("message_stop", b'{"type":"message_stop"}')
    assert last.done and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_tokens, last.usage.completion_tokens) == (14, 7, 9)


def _delta(output: int, **prompt: object) -> bytes:
    return json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {**prompt, "output_tokens": output}}).encode()


@pytest.mark.parametrize(
    "start",
    [
        None,  # llama-server leaves message_start out when its first token is not a whole character
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"output_tokens": 1}}},
        {"type": "message_start", "message": {"id": "msg_1"}},
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": None, "output_tokens": 1}}},
    ],
    ids=["no-start", "no-input-tokens", "no-usage", "null-input-tokens"],
)
def test_a_stream_that_never_counts_its_prompt_reports_the_output_only(start: dict[str, object] | None) -> None:
    # Output alone would bill the prompt as 0 tokens: the usage says the prompt went uncounted
    # (the accountant estimates it) and keeps the output's exact count.
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    if start is not None:
        assert stream.feed("message_start", json.dumps(start).encode()).prompt_usage is None
    delta = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'
    assert stream.feed("content_block_delta", delta).usage is None
    usage = stream.feed("message_delta", _delta(9)).usage
    assert usage is not None and not usage.prompt_reported and usage.completion_tokens == 9
    last = stream.feed("message_stop", b'{"type":"message_stop"}')
    assert last.done and last.usage is not None and not last.usage.prompt_reported


def test_message_starts_output_count_is_a_placeholder_never_the_answers() -> None:
    # Anthropic's message_start says output_tokens 1; a stream whose message_delta then counts
    # nothing has no output count: none is reported (the relayed deltas are counted instead).
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    start = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 5, "output_tokens": 1}}}
    prompt = stream.feed("message_start", json.dumps(start).encode()).prompt_usage
    assert prompt is not None and (prompt.prompt_tokens, prompt.completion_tokens) == (5, 0)
    bare = b'{"type":"message_delta","delta":{"stop_reason":"end_turn"}}'
    assert stream.feed("message_delta", bare).usage is None
    assert stream.feed("message_stop", b'{"type":"message_stop"}').usage is None


def test_a_later_zero_does_not_erase_a_counted_prompt_and_zeros_alone_count_nothing() -> None:
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    start = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 25, "output_tokens": 1}}}
    stream.feed("message_start", json.dumps(start).encode())
    usage = stream.feed("message_delta", _delta(15, input_tokens=0)).usage
    assert usage is not None and usage.prompt_reported and (usage.prompt_tokens, usage.completion_tokens) == (25, 15)
    zeros = AnthropicAdapter().native_stream(TARGET, "messages")
    assert zeros.feed("message_delta", _delta(0, input_tokens=0)).usage is None


def test_a_prompt_counted_by_message_delta_or_by_cache_fields_alone_is_reported() -> None:
    late = AnthropicAdapter().native_stream(TARGET, "messages")
    usage = late.feed("message_delta", _delta(9, input_tokens=5)).usage
    assert usage is not None and usage.prompt_reported and (usage.prompt_tokens, usage.completion_tokens) == (5, 9)
    cached = AnthropicAdapter().native_stream(TARGET, "messages")
    start = {"type": "message_start", "message": {"id": "msg_1", "usage": {"cache_read_input_tokens": 100}}}
    prompt = cached.feed("message_start", json.dumps(start).encode()).prompt_usage
    assert prompt is not None and prompt.prompt_reported and (prompt.prompt_tokens, prompt.cached_tokens) == (100, 100)
    usage = cached.feed("message_delta", _delta(3)).usage
    assert usage is not None and usage.prompt_reported and usage.completion_tokens == 3


@pytest.mark.parametrize(
    ("usage", "expected"),
    [(None, None), ({}, None), ({"output_tokens": 4}, (False, 4)), ({"input_tokens": None, "output_tokens": 4}, (False, 4)),
     ({"input_tokens": 0, "output_tokens": 4}, (False, 4)),  # no prompt is 0 tokens
     ({"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 4}, (False, 4)),
     ({"input_tokens": 5, "output_tokens": 4}, (True, 4)), ({"input_tokens": 5}, None),
     ({"input_tokens": 0, "output_tokens": 0}, None)],  # zeros count nothing: estimated whole
)
def test_a_message_that_does_not_count_its_prompt_reports_so(usage: object, expected: tuple[bool, int] | None) -> None:
    body: dict[str, object] = {"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "Hi"}]}
    if usage is not None:
        body["usage"] = usage
    parsed = AnthropicAdapter().parse_native(TARGET, "messages", json.dumps(body).encode())
    got = None if parsed.usage is None else (parsed.usage.prompt_reported, parsed.usage.completion_tokens)
    assert got == expected


def test_an_error_event_fails_the_stream() -> None:
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    with pytest.raises(ProviderStreamError, match="overloaded_error"):
        stream.feed("error", b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "overloaded_error"),
        (b'{"type": "error", "error": {"type": "api_error", "message": "boom"}}', "api_error"),
        (b"{not json", "an invalid stream event"),
    ],
)
def test_an_event_named_opaque_is_read_by_its_datas_type(data: bytes, match: str) -> None:
    # SDKs take an event's type from its data: an `event:` name never lets another type pass unread.
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    with pytest.raises(ProviderStreamError, match=match):
        stream.feed("content_block_delta", data)


def test_an_opaque_event_whose_data_says_another_type_is_relayed_under_that_type() -> None:
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    start = json.dumps({"type": "message_start", "message": {"id": "msg_1", "usage": USAGE}}).encode()
    chunk = stream.feed("ping", start)
    assert chunk.payloads == [b"event: message_start\ndata: " + start + b"\n\n"] and chunk.prompt_usage is not None
