"""Chat answers -> Messages answers and SSE events: content blocks, stop reasons, usage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.translate.anthropic_response import MessagesStream, to_message


def chat(message: dict[str, Any], finish: str | None = "stop", usage: dict[str, Any] | None = None, **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 3},
    }


def message(body: dict[str, Any], stops: tuple[str, ...] = ()) -> dict[str, Any]:
    return to_message(body, model="public", message_id="msg_1", stop_sequences=stops)


def test_text_answer() -> None:
    out = message(chat({"role": "assistant", "content": "Hello"}))
    assert out == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "public",
        "content": [{"type": "text", "text": "Hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }


def test_tool_calls_become_tool_use_blocks_with_parsed_input() -> None:
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "not json"}},
    ]
    out = message(chat({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"))
    assert out["content"] == [
        {"type": "tool_use", "id": "call_a", "name": "f", "input": {"x": 1}},
        {"type": "tool_use", "id": "call_b", "name": "g", "input": {"_unparsed_arguments": "not json"}},
    ]
    assert out["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    ("finish", "extra", "reason", "sequence"),
    [
        ("stop", {}, "end_turn", None),
        ("length", {}, "max_tokens", None),
        ("content_filter", {}, "refusal", None),
        ("stop", {"stop_reason": "END"}, "stop_sequence", "END"),  # vLLM names the matched stop
        ("stop", {"matched_stop": "END"}, "stop_sequence", "END"),  # SGLang too
        ("stop", {"stop_reason": 2}, "end_turn", None),  # vLLM: a stop token id, not a sequence
    ],
)
def test_stop_reasons(finish: str, extra: dict[str, Any], reason: str, sequence: str | None) -> None:
    out = message(chat({"role": "assistant", "content": "x"}, finish, **extra), stops=("END",))
    assert (out["stop_reason"], out["stop_sequence"]) == (reason, sequence)


def test_cached_tokens_are_reported_apart_from_input_tokens() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}}
    out = message(chat({"role": "assistant", "content": "x"}, usage=usage))
    assert out["usage"] == {"input_tokens": 36, "output_tokens": 5, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0}


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if not block:
            continue
        name_line, data_line = block.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        data = json.loads(data_line[6:])
        assert data["type"] == name_line[7:]
        out.append((name_line[7:], data))
    return out


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def test_a_text_then_tool_stream_opens_and_closes_blocks_in_order() -> None:
    stream = MessagesStream(model="public", message_id="msg_1", input_tokens=12, stop_sequences=())
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    raw = stream.frame([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"})])
    raw += stream.frame([chunk({"tool_calls": [call]}), chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x"'}}]})])
    raw += stream.frame([chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}), chunk({}, "tool_calls")])
    raw += stream.frame([chunk(usage={"prompt_tokens": 11, "completion_tokens": 7})])
    raw += stream.end()
    got = events(raw)
    assert [name for name, _ in got] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = got[0][1]["message"]
    assert start["usage"] == {"input_tokens": 12, "output_tokens": 0} and start["content"] == []
    assert got[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert got[3][1]["delta"] == {"type": "text_delta", "text": "Hi"}
    assert got[5][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert [d["delta"]["partial_json"] for _, d in got[6:8]] == ['{"x"', ": 1}"]
    assert all(d["index"] == 1 for _, d in got[5:9])
    assert got[9][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


def test_a_stream_without_usage_keeps_the_gateways_count() -> None:
    stream = MessagesStream(model="m", message_id="msg_1", input_tokens=9, stop_sequences=())
    got = events(stream.frame([chunk({"content": "a"}), chunk({}, "length")]) + stream.end())
    assert got[-2][1]["delta"]["stop_reason"] == "max_tokens"
    assert got[-2][1]["usage"] == {"input_tokens": 9, "output_tokens": 0}


def test_a_stream_whose_usage_counts_no_prompt_keeps_the_gateways_count_of_it() -> None:
    stream = MessagesStream(model="m", message_id="msg_1", input_tokens=9, stop_sequences=())
    output_only = {**json.loads(chunk({}, "stop")), "usage": {"completion_tokens": 4}}
    got = events(stream.frame([chunk({"content": "a"}), json.dumps(output_only).encode()]) + stream.end())
    assert got[-2][1]["usage"] == {"input_tokens": 9, "output_tokens": 4}


def test_a_whole_answer_whose_usage_counts_no_prompt_shows_the_gateways_count_of_it() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 4}}
    message = to_message(body, model="m", message_id="msg_1", stop_sequences=(), input_tokens=9)
    assert message["usage"] == {"input_tokens": 9, "output_tokens": 4}
    counted = {**body, "usage": {"prompt_tokens": 12, "completion_tokens": 4}}
    assert to_message(counted, model="m", message_id="msg_1", stop_sequences=(), input_tokens=9)["usage"]["input_tokens"] == 12


def test_two_parallel_tool_calls_are_two_blocks() -> None:
    stream = MessagesStream(model="m", message_id="msg_1", input_tokens=1, stop_sequences=())
    calls = [
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
        {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}},
    ]
    got = events(stream.frame([chunk({"tool_calls": calls}), chunk({}, "tool_calls")]) + stream.end())
    starts = [d for name, d in got if name == "content_block_start"]
    assert [(s["index"], s["content_block"]["id"]) for s in starts] == [(0, "a"), (1, "b")]


def test_reasoning_becomes_a_thinking_block_only_when_the_client_asked() -> None:
    body = chat({"role": "assistant", "content": "42", "reasoning_content": "6 times 7"})
    asked = to_message(body, model="m", message_id="msg_1", stop_sequences=(), thinking=True)
    assert asked["content"] == [{"type": "thinking", "thinking": "6 times 7", "signature": ""}, {"type": "text", "text": "42"}]
    assert message(body)["content"] == [{"type": "text", "text": "42"}]


def test_streamed_reasoning_is_a_thinking_block_before_the_text() -> None:
    stream = MessagesStream(model="m", message_id="msg_1", input_tokens=1, stop_sequences=(), thinking=True)
    raw = stream.frame([chunk({"reasoning_content": "6 times"}), chunk({"reasoning_content": " 7"}), chunk({"content": "42"}), chunk({}, "stop")])
    got = events(raw + stream.end())
    starts = [d["content_block"] for name, d in got if name == "content_block_start"]
    assert starts == [{"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""}]
    deltas = [d["delta"] for name, d in got if name == "content_block_delta"]
    assert deltas == [
        {"type": "thinking_delta", "thinking": "6 times"},
        {"type": "thinking_delta", "thinking": " 7"},
        {"type": "text_delta", "text": "42"},
    ]
    quiet = MessagesStream(model="m", message_id="msg_1", input_tokens=1, stop_sequences=())
    assert b"thinking" not in quiet.frame([chunk({"reasoning_content": "hidden"})])
