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


def test_a_stream_that_never_counts_its_prompt_reports_no_usage() -> None:
    # Without message_start (llama-server leaves it out when its first token is not a whole
    # character) no event counts the prompt: output alone would bill the prompt as 0 tokens,
    # so the stream reports none and the accountant estimates both (`gateway.pipeline.estimate`).
    stream = AnthropicAdapter().native_stream(TARGET, "messages")
    delta = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'
    end = b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}'
    assert stream.feed("content_block_delta", delta).usage is None
    assert stream.feed("message_delta", end).usage is None
    last = stream.feed("message_stop", b'{"type":"message_stop"}')
    assert last.done and last.usage is None
    # A message_delta that counts the prompt itself is enough.
    counted = AnthropicAdapter().native_stream(TARGET, "messages")
    both = b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"output_tokens":9}}'
    usage = counted.feed("message_delta", both).usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (5, 9)


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
