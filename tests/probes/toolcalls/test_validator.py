"""The validator on hand-written responses: every call class, leaks, finish_reason consistency,
tool_choice, truncation, and the schema cache."""

from __future__ import annotations

import json
from typing import Any

import pytest

from probes.toolcalls.schemas import ACCEPT_ANY
from probes.toolcalls.validator import SchemaCache, ToolSpec, classify_response, leaks_call

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
NO_SCHEMA = {"type": "function", "function": {"name": "ping"}}
REQUEST = {"tools": [WEATHER, NO_SCHEMA]}


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def response(*calls: dict[str, Any], content: str | None = None, finish: str | None = "tool_calls") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def classify(resp: dict[str, Any], request: dict[str, Any] = REQUEST) -> Any:
    return classify_response(resp, ToolSpec.from_request(request), SchemaCache())


@pytest.mark.parametrize(
    "calls, expected",
    [
        ([call("get_weather", '{"city": "Paris"}')], ["ok"]),
        ([call("get_weather", '{"city": "Paris", "unit": "c"}'), call("ping", "{}")], ["ok", "ok"]),
        ([call("get_weather", '{"city": "Par')], ["invalid_json"]),
        ([call("get_weather", None)], ["invalid_json"]),
        ([call("get_wether", '{"city": "Paris"}')], ["unknown_name"]),
        ([call("get_weather", "{}")], ["schema_mismatch"]),  # required city missing
        ([call("get_weather", '{"city": 3}')], ["schema_mismatch"]),  # retyped
        ([call("get_weather", '{"city": "Paris", "unit": "kelvin"}')], ["schema_mismatch"]),  # not in the enum
        ([call("ping", '{"anything": [1, 2]}')], ["ok"]),  # no schema: anything goes (OpenRouter's rule)
        ([call("ping", "")], ["ok"]),  # an engine's empty arguments for a parameterless tool
        ([call("get_weather", {"city": "Paris"})], ["ok"]),  # an object instead of a string: judged by content
        ([call("get_weather", '{"city": "Paris"}'), call("nope", "{}")], ["ok", "unknown_name"]),
    ],
)
def test_call_classes(calls: list[dict[str, Any]], expected: list[str]) -> None:
    report = classify(response(*calls))
    (choice,) = report.choices
    assert list(choice.calls) == expected
    assert report.bad == any(c != "ok" for c in expected)
    assert report.counts() == {k: expected.count(k) for k in set(expected)}


def test_finish_reason_must_match_the_message() -> None:
    good = call("get_weather", '{"city": "Paris"}')
    assert not classify(response(good, finish="tool_calls")).bad
    assert not classify(response(good, finish="stop")).bad  # OpenAI's answer to a forced call
    odd = classify(response(good, finish="eos"))
    assert odd.bad and odd.counts()["finish_reason_mismatch"] == 1
    empty = classify(response(content="Hello", finish="tool_calls"))
    assert empty.bad and empty.counts() == {"finish_reason_mismatch": 1}
    assert not classify(response(content="Hello", finish="stop")).bad


@pytest.mark.parametrize("finish", [["stop"], {"reason": "stop"}, 1, True])
@pytest.mark.parametrize("calls", [(call("get_weather", '{"city": "Paris"}'),), ()])
def test_a_finish_reason_that_is_not_a_string_is_a_mismatch(finish: Any, calls: tuple[dict[str, Any], ...]) -> None:
    # A list or an object raised TypeError (unhashable) out of the tool-call probe and the passive monitor.
    report = classify(
        {"choices": [{"index": 0, "message": {"content": "Hi", "tool_calls": list(calls)}, "finish_reason": finish}]}
    )
    assert report.bad and report.counts()["finish_reason_mismatch"] == 1


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        'Sure! <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
        '{"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}',
        'I think {not json} then {"name": "ping", "arguments": {}}',
    ],
)
def test_a_call_leaked_into_content_is_caught(content: str) -> None:
    report = classify(response(content=content, finish="stop"))
    assert report.bad and report.counts() == {"leaked_to_content": 1}


@pytest.mark.parametrize(
    "content",
    [
        "The weather in Paris is mild.",
        'Here is JSON: {"city": "Paris"}',  # no tool named
        '{"name": "get_weather"}',  # a name without arguments is prose about the tool, not a call
        'I used {"name": "unknown_tool", "arguments": {}}',
        # A small model echoing the tool's definition from its system prompt:
        'You can call this tool: {"name": "get_weather", "description": "Weather.", "parameters": {"city": 1}}',
        '{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}',
    ],
)
def test_ordinary_content_is_not_a_leak(content: str) -> None:
    assert not classify(response(content=content, finish="stop")).bad


def test_a_leak_while_tools_are_off_is_not_counted() -> None:
    leaked = response(content='{"name": "get_weather", "arguments": {"city": "Paris"}}', finish="stop")
    assert not classify(leaked, {**REQUEST, "tool_choice": "none"}).bad


def test_tool_choice_is_enforced() -> None:
    weather = call("get_weather", '{"city": "Paris"}')
    ping = call("ping", "{}")
    named = {**REQUEST, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    assert not classify(response(weather, finish="stop"), named).bad
    assert classify(response(ping), named).counts() == {"unknown_name": 1}  # not the forced function
    assert classify(response(weather), {**REQUEST, "tool_choice": "none"}).counts() == {"unknown_name": 1}
    required = {**REQUEST, "tool_choice": "required"}
    assert classify(response(content="Hi", finish="stop"), required).counts() == {"finish_reason_mismatch": 1}
    assert not classify(response(content="Hi", finish="stop"), {**REQUEST, "tool_choice": "auto"}).bad


@pytest.mark.parametrize("finish", ["length", "content_filter", None])
def test_cut_short_responses_are_not_judged(finish: str | None) -> None:
    report = classify(response(call("get_weather", '{"city": "Pa'), finish=finish))
    assert not report.bad and not report.judged
    assert report.counts() == {"truncated": 1}


def test_every_choice_is_judged() -> None:
    resp = {
        "choices": [
            {"index": 0, "message": {"tool_calls": [call("get_weather", '{"city": "A"}')]}, "finish_reason": "tool_calls"},
            {"index": 1, "message": {"tool_calls": [call("get_weather", "{")]}, "finish_reason": "tool_calls"},
        ]
    }
    report = classify(resp)
    assert report.bad and report.counts() == {"ok": 1, "invalid_json": 1}


def test_schema_cache_compiles_once_per_schema_and_stays_bounded() -> None:
    cache = SchemaCache(maxsize=2)
    schema = WEATHER["function"]["parameters"]
    same = json.loads(json.dumps(schema))  # equal content, another object, another key order
    same["properties"] = dict(reversed(list(same["properties"].items())))
    assert cache.get(schema) is cache.get(same)
    assert len(cache) == 1
    for i in range(3):
        cache.get({"type": "object", "properties": {f"k{i}": {"type": "string"}}})
    assert len(cache) == 2
    assert cache.get(None) is ACCEPT_ANY and cache.get({}) is ACCEPT_ANY
    broken = cache.get({"type": "no-such-type"})  # a broken schema cannot blame the endpoint
    assert broken.validator is None and broken.unchecked is not None


def test_a_call_to_a_tool_whose_schema_cannot_be_checked_is_unchecked_not_bad() -> None:
    tool = {"type": "function", "function": {"name": "odd", "parameters": {"type": "no-such-type"}}}
    report = classify(response(call("odd", '{"a": 1}')), {"tools": [tool]})
    assert report.counts() == {"unchecked": 1} and not report.bad and report.judged


def test_leak_scan_is_bounded() -> None:
    noise = "{x} " * 10_000
    assert not leaks_call(noise + '{"name": "ping", "arguments": {}}', ["ping"])
    assert leaks_call('{"name": "ping", "arguments": {}}' + noise, ["ping"])
