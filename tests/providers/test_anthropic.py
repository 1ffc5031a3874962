"""The Anthropic upstream adapter: chat request -> Messages request, Message / SSE events -> chat
shape, and Anthropic's errors (529 overloaded, retry-after) as the gateway's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kernel.errors import ProviderRateLimited, ProviderRejected, ProviderServerError, ProviderStreamError
from providers.anthropic import API_VERSION, DEFAULT_MAX_TOKENS, AnthropicAdapter
from providers.base import Target, UpstreamRequest

TARGET = Target("anth-0", "https://anthropic.example/v1", "claude-upstream", "claude", api_key="sk-ant-secret")


def request_body(body: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    request = AnthropicAdapter().build_request(TARGET, "chat", body, stream)
    return json.loads(request.body)  # type: ignore[no-any-return]


def test_the_request_carries_anthropics_headers_and_path() -> None:
    request = AnthropicAdapter().build_request(TARGET, "chat", {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}, True)
    assert request.url == "https://anthropic.example/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-secret" and request.headers["anthropic-version"] == API_VERSION
    assert "authorization" not in request.headers
    body = json.loads(request.body)
    assert body == {"model": "claude-upstream", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": DEFAULT_MAX_TOKENS, "stream": True}


def test_a_tool_conversation_maps_to_system_tool_use_and_tool_result_blocks() -> None:
    body = {
        "model": "claude",
        "max_tokens": 50,
        "temperature": 1.6,
        "stop": "END",
        "user": "u-1",
        "parallel_tool_calls": False,
        "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "42"},
            {"role": "user", "content": "thanks"},
        ],
    }
    out = request_body(body)
    assert out["system"] == "be brief"
    assert out["max_tokens"] == 50 and out["temperature"] == 1.0 and out["stop_sequences"] == ["END"]
    assert out["metadata"] == {"user_id": "u-1"}
    assert out["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}, {"type": "text", "text": "thanks"}]},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", {"type": "auto"}), ("none", {"type": "none"}), ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"})],
)
def test_tool_choice(choice: Any, expected: dict[str, Any]) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert request_body({"messages": [{"role": "user", "content": "x"}], "tools": tools, "tool_choice": choice})["tool_choice"] == expected


def test_a_json_schema_response_format_becomes_output_config() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    out = request_body({"messages": [{"role": "user", "content": "x"}], "response_format": fmt})
    assert out["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


@pytest.mark.parametrize("field", [{"logprobs": True}, {"response_format": {"type": "json_object"}}])
def test_what_messages_cannot_do_is_a_400(field: dict[str, Any]) -> None:
    with pytest.raises(ProviderRejected) as caught:
        request_body({"messages": [{"role": "user", "content": "x"}], **field})
    assert caught.value.status_code == 400 and caught.value.param == next(iter(field))


def test_a_message_becomes_a_chat_completion_with_cache_usage() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": [{"type": "text", "text": "Hi. "}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 7},
    }
    parsed = AnthropicAdapter().parse_response(TARGET, "chat", json.dumps(message).encode())
    chat = json.loads(parsed.body)
    assert chat["model"] == "claude"
    choice = chat["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Hi. "
    assert choice["message"]["tool_calls"] == [{"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]
    assert chat["usage"]["prompt_tokens"] == 125 and chat["usage"]["prompt_tokens_details"] == {"cached_tokens": 100}
    assert chat["usage"]["cache_creation_input_tokens"] == 20
    assert parsed.usage is not None and (parsed.usage.prompt_tokens, parsed.usage.cached_tokens, parsed.usage.completion_tokens) == (125, 100, 7)


@pytest.mark.parametrize(("reason", "finish"), [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("refusal", "content_filter")])
def test_stop_reasons_become_finish_reasons(reason: str, finish: str) -> None:
    message = {"id": "m", "content": [{"type": "text", "text": "x"}], "stop_reason": reason, "usage": {"input_tokens": 1, "output_tokens": 1}}
    chat = json.loads(AnthropicAdapter().parse_response(TARGET, "chat", json.dumps(message).encode()).body)
    assert chat["choices"][0]["finish_reason"] == finish


def test_not_a_message_is_an_upstream_failure() -> None:
    with pytest.raises(ProviderServerError):
        AnthropicAdapter().parse_response(TARGET, "chat", b'{"type": "message"}')


def feed_all(events: list[dict[str, Any]], include_usage: bool = True) -> tuple[list[dict[str, Any]], Any, bool]:
    translator = AnthropicAdapter().stream_translator(TARGET, "chat", {"stream_options": {"include_usage": include_usage}})
    payloads: list[dict[str, Any]] = []
    usage, done = None, False
    for event in events:
        chunk = translator.feed(event["type"], json.dumps(event).encode())
        payloads.extend(json.loads(p) for p in chunk.payloads)
        usage = chunk.usage or usage
        done = done or chunk.done
    return payloads, usage, done


TOOL_STREAM = [
    {"type": "message_start", "message": {"id": "msg_9", "usage": {"input_tokens": 10, "cache_read_input_tokens": 30, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"a"'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 12}},
    {"type": "message_stop"},
]


def test_the_stream_becomes_chat_chunks_with_tool_call_deltas_and_usage_last() -> None:
    payloads, usage, done = feed_all(TOOL_STREAM)
    assert done
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert payloads[0]["id"] == "chatcmpl-msg_9" and payloads[0]["model"] == "claude"
    deltas = [p["choices"][0]["delta"] for p in payloads if p["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "Let me check."
    calls = [c for d in deltas for c in d.get("tool_calls", ())]
    assert calls[0] == {"index": 0, "id": "toolu_9", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert "".join(c["function"]["arguments"] for c in calls) == '{"a": 1}'
    assert payloads[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["prompt_tokens"] == 40
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (40, 30, 12)


def test_usage_is_counted_but_not_sent_when_the_client_did_not_ask() -> None:
    payloads, usage, done = feed_all(TOOL_STREAM, include_usage=False)
    assert done and all("usage" not in p for p in payloads)
    assert usage.completion_tokens == 12


def test_the_translated_streams_prompt_count_comes_with_message_start_and_survives_a_later_zero() -> None:
    translator = AnthropicAdapter().stream_translator(TARGET, "chat", {})
    start = {"type": "message_start", "message": {"id": "msg_9", "usage": {"input_tokens": 500, "output_tokens": 1}}}
    prompt = translator.feed("message_start", json.dumps(start).encode()).prompt_usage
    assert prompt is not None and (prompt.prompt_tokens, prompt.completion_tokens) == (500, 0)
    # A message_delta whose usage zeroes the prompt and counts no output: the prompt stays counted,
    # and no usage is reported (message_start's output_tokens was a placeholder): the relayed text is counted.
    zeroed = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 0}}
    translator.feed("message_delta", json.dumps(zeroed).encode())
    assert translator.feed("message_stop", b'{"type":"message_stop"}').usage is None
    counted = AnthropicAdapter().stream_translator(TARGET, "chat", {})
    counted.feed("message_start", json.dumps(start).encode())
    counted.feed("message_delta", json.dumps({**zeroed, "usage": {"input_tokens": 0, "output_tokens": 7}}).encode())
    usage = counted.feed("message_stop", b'{"type":"message_stop"}').usage
    assert usage is not None and usage.prompt_reported and (usage.prompt_tokens, usage.completion_tokens) == (500, 7)


def test_a_message_start_whose_message_is_not_an_object_is_read_as_empty() -> None:
    translator = AnthropicAdapter().stream_translator(TARGET, "chat", {})
    chunk = translator.feed("message_start", b'{"type":"message_start","message":"x"}')
    assert chunk.prompt_usage is None and json.loads(chunk.payloads[0])["id"] == "chatcmpl-"


def test_an_error_event_mid_stream_breaks_it() -> None:
    translator = AnthropicAdapter().stream_translator(TARGET, "chat", {})
    translator.feed("message_start", json.dumps(TOOL_STREAM[0]).encode())
    with pytest.raises(ProviderStreamError) as caught:
        translator.feed("error", b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}')
    assert "overloaded_error" in caught.value.message


def test_errors_map_to_the_gateways() -> None:
    adapter = AnthropicAdapter()
    overloaded = adapter.map_error(TARGET, 529, {"retry-after": "3"}, b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    assert isinstance(overloaded, ProviderServerError) and overloaded.retryable and overloaded.retry_after == 3.0
    limited = adapter.map_error(TARGET, 429, {"retry-after": "7"}, b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}')
    assert isinstance(limited, ProviderRateLimited) and limited.retry_after == 7.0
    rejected = adapter.map_error(TARGET, 400, {}, b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}')
    assert isinstance(rejected, ProviderRejected) and rejected.client_message() == "prompt is too long"


def test_counting_posts_the_messages_body_less_what_count_tokens_refuses() -> None:
    body = {
        "model": "claude",
        "max_tokens": 10,
        "temperature": 0.5,
        "stop": ["x"],
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
    }
    request = AnthropicAdapter().count_step(TARGET, body, 0, None)
    assert isinstance(request, UpstreamRequest)
    assert request.url == TARGET.base_url + "/messages/count_tokens"
    assert request.headers["anthropic-version"] == "2023-06-01"
    sent = json.loads(request.body)
    assert set(sent) == {"model", "messages", "system", "tools", "tool_choice"}
    assert sent["system"] == "Be brief." and sent["tool_choice"] == {"type": "any"}
    assert AnthropicAdapter().count_step(TARGET, body, 1, b'{"input_tokens": 42}') == 42
    for bad in (b"", b"{}", b'{"input_tokens": "42"}', b'{"input_tokens": -1}', b'{"input_tokens": true}'):
        with pytest.raises(ProviderServerError):
            AnthropicAdapter().count_step(TARGET, body, 1, bad)
