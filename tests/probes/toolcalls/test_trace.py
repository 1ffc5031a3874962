"""Streamed tool-call deltas assembled per choice, then classified like a non-streaming body."""

from __future__ import annotations

import json
from typing import Any

from probes.toolcalls.trace import ToolTrace
from probes.toolcalls.validator import LEAK_SCAN_CHARS, SchemaCache, ToolSpec, classify_response
from tests.probes.toolcalls.test_validator import REQUEST


def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return json.dumps({"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}).encode()


def tool_delta(name: str | None, arguments: str, index: int = 0) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        fn["name"] = name
    return {"tool_calls": [{"index": index, "function": fn}]}


def classify(trace: ToolTrace) -> Any:
    resp = trace.response()
    assert resp is not None
    return classify_response(resp, ToolSpec.from_request(REQUEST), SchemaCache())


def test_deltas_make_whole_calls() -> None:
    trace = ToolTrace()
    trace.feed_chunks([chunk(0, {"role": "assistant", **tool_delta("get_weather", "")})])
    trace.feed_chunks([chunk(0, tool_delta(None, '{"city"')), chunk(0, tool_delta(None, ': "Paris"}'))])
    trace.feed_chunks([chunk(0, tool_delta("ping", "{}", index=1)), chunk(0, {}, "tool_calls")])
    resp = trace.response()
    assert resp is not None
    calls = resp["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("ping", "{}"),
    ]
    report = classify(trace)
    assert not report.bad and report.counts() == {"ok": 2}


def test_a_name_repeated_in_every_delta_is_not_concatenated() -> None:
    trace = ToolTrace()  # llama.cpp's server repeats id and name in each delta
    for part in ('{"ci', 'ty": "Oslo"}'):
        trace.feed_chunks([chunk(0, tool_delta("get_weather", part))])
    trace.feed_chunks([chunk(0, {}, "tool_calls")])
    assert classify(trace).counts() == {"ok": 1}


def test_broken_streamed_arguments_and_names_are_caught() -> None:
    trace = ToolTrace()
    trace.feed_chunks([chunk(0, tool_delta("get_weather", '{"city": "Pa')), chunk(0, {}, "tool_calls")])
    trace.feed_chunks([chunk(1, tool_delta("get_wether", '{"city": "Rome"}')), chunk(1, {}, "tool_calls")])
    assert classify(trace).counts() == {"invalid_json": 1, "unknown_name": 1}


def test_streamed_content_leak_is_caught() -> None:
    trace = ToolTrace()
    for piece in ['<tool_call>{"name": "get_', 'weather", "arguments": {"city": ', '"Lima"}}</tool_call>']:
        trace.feed_chunks([chunk(0, {"content": piece})])
    trace.feed_chunks([chunk(0, {}, "stop")])
    assert classify(trace).counts() == {"leaked_to_content": 1}


def test_a_stream_without_a_finish_is_not_judged() -> None:
    trace = ToolTrace()  # the client left mid-stream
    trace.feed_chunks([chunk(0, tool_delta("get_weather", '{"city'))])
    report = classify(trace)
    assert not report.judged and not report.bad


def test_content_kept_is_bounded_and_bad_payloads_are_noted() -> None:
    trace = ToolTrace()
    for _ in range(100):
        trace.feed_chunks([chunk(0, {"content": "x" * 1000})])
    trace.feed_chunks([b"not json", b'{"choices": [], "usage": {"prompt_tokens": 1}}'])
    resp = trace.response()
    assert resp is not None
    assert len(resp["choices"][0]["message"]["content"]) <= LEAK_SCAN_CHARS + 1000
    assert trace.unreadable


def test_non_streaming_body_is_used_as_is() -> None:
    trace = ToolTrace()
    assert trace.response() is None
    body = {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]}
    trace.feed_body(json.dumps(body).encode())
    assert trace.response() == body
    broken = ToolTrace()
    broken.feed_body(b"{")
    assert broken.response() is None and broken.unreadable
