"""The Responses translation as pure functions: request -> chat body, chat answer -> response,
chat chunks -> typed events, on the shapes upstreams really send and on garbage."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.translate.responses_output import assistant_message, response_from_chat
from gateway.translate.responses_request import translate, validate_envelope
from gateway.translate.responses_stream import ResponseStream
from kernel.errors import InvalidRequest


def events(blob: bytes) -> list[dict[str, Any]]:
    out = []
    for block in blob.split(b"\n\n"):
        if not block:
            continue
        head, data = block.split(b"\n", 1)
        event = orjson.loads(data.removeprefix(b"data: "))
        assert head == b"event: " + event["type"].encode()  # the SSE event name is the type
        out.append(event)
    return out


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def run(chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    stream = ResponseStream("resp_1", 7, "m", {"store": True}, logprobs=False)
    blob = stream.start() + b"".join(stream.feed(c) for c in chunks) + stream.finish()
    return events(blob), stream.response


def test_a_call_named_after_its_first_fragment_is_announced_with_its_name() -> None:
    got, response = run(
        [
            chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": '{"ci'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": 'ty": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
            chunk(finish="tool_calls"),
        ]
    )
    added = [e for e in got if e["type"] == "response.output_item.added"]
    assert [a["item"]["name"] for a in added] == ["get_weather"]
    deltas = "".join(e["delta"] for e in got if e["type"] == "response.function_call_arguments.delta")
    assert deltas == '{"city": "Oslo"}'
    [item] = response["output"]
    assert (item["call_id"], item["arguments"], item["status"]) == ("call_a", '{"city": "Oslo"}', "completed")
    assert [e["sequence_number"] for e in got] == list(range(len(got)))


def test_text_then_calls_are_items_in_order_and_a_nameless_call_is_still_closed() -> None:
    got, response = run(
        [
            chunk({"content": "Let me check."}),
            chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "f", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"arguments": "{}"}}]}),  # never named
            chunk(finish="tool_calls"),
        ]
    )
    assert [i["type"] for i in response["output"]] == ["message", "function_call", "function_call"]
    assert [i.get("call_id") for i in response["output"]] == [None, "c0", "c1"]
    done = [e["output_index"] for e in got if e["type"] == "response.output_item.done"]
    assert done == [0, 1, 2]
    assert got[-1]["type"] == "response.completed" and got[-1]["response"]["status"] == "completed"
    assert assistant_message(response) == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}},
        ],
    }


def test_length_finish_is_response_incomplete() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    got, response = run([chunk({"content": "a b"}), chunk(finish="length"), {"choices": [], "usage": usage}])
    assert got[-1]["type"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["usage"]["output_tokens"] == 2 and response["usage"]["total_tokens"] == 5


GARBAGE: list[Any] = [
    {"choices": "x"},
    {"choices": [5, None, "a"]},
    {"choices": [{"index": 0, "delta": "text"}]},
    {"choices": [{"index": 0, "delta": {"content": 5, "tool_calls": "x"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": {}, "function": "f"}, 3]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": 5, "function": {"name": 5, "arguments": {}}}]}}]},
    {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": {"a": 1}, "logprobs": "bad"}]},
    {"choices": [], "usage": {"prompt_tokens": "many", "prompt_tokens_details": 5}},
]


@pytest.mark.parametrize("bad", GARBAGE)
def test_garbage_chunks_never_raise(bad: Any) -> None:
    stream = ResponseStream("resp_1", 7, "m", {}, logprobs=True)
    blob = stream.start() + stream.feed(bad) + stream.finish()
    assert events(blob)[-1]["type"] in ("response.completed", "response.incomplete")


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"choices": []},
        {"choices": [None]},
        {"choices": [{"message": "hi", "finish_reason": ["x"]}]},
        {"choices": [{"message": {"content": 5, "tool_calls": [1, {"function": 2}, {"function": {"arguments": {"a": 1}}}]}}]},
        {"choices": [{"message": {"content": "x"}, "logprobs": {"content": [1, {"token": 2, "top_logprobs": 3}]}}]},
        {"choices": [{"message": {"content": "x"}}], "usage": {"completion_tokens": -4, "prompt_tokens": True}},
    ],
)
def test_garbage_answers_never_raise(bad: dict[str, Any]) -> None:
    response = response_from_chat(bad, "resp_1", 7, "m", {}, logprobs=True)
    assert response["object"] == "response" and isinstance(response["output"], list)


def test_object_arguments_become_json_text() -> None:
    chat = {"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}}]}
    assert response_from_chat(chat, "r", 1, "m", {}, logprobs=False)["output"][0]["arguments"] == '{"a":1}'


def test_request_items_become_chat_messages() -> None:
    body = {
        "model": "m",
        "instructions": "rules",
        "seed": 4,  # an unknown field passes through, as on the chat route
        "metadata": {"k": "v"},
        "input": [
            {"role": "developer", "content": "dev"},
            {"role": "assistant", "content": "checking"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ],
    }
    validate_envelope(body)
    req = translate(body, history=[{"role": "user", "content": "earlier"}])
    assert req.body["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "earlier"},
        {"role": "system", "content": "dev"},
        {"role": "assistant", "content": "checking", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    assert req.body["seed"] == 4 and not {"input", "instructions", "metadata"} & req.body.keys()
    assert [i["type"] for i in req.input_items] == ["message", "message", "function_call", "function_call_output"]
    assert req.turn == req.body["messages"][2:]  # stored for the next turn: no instructions, no history
    assert req.echo["metadata"] == {"k": "v"} and req.echo["store"] is True


def test_stream_asks_for_usage_and_unsupported_fields_are_named() -> None:
    assert translate({"model": "m", "input": "x", "stream": True}).body["stream_options"] == {"include_usage": True}
    for field, value in (("background", True), ("conversation", "conv_1"), ("prompt", {"id": "p"}), ("n", 2)):
        with pytest.raises(InvalidRequest) as err:
            validate_envelope({"model": "m", "input": "x", field: value})
        assert err.value.param == field


@pytest.mark.parametrize("entry", [[], {}, None, 1, ["message.output_text.logprobs"]])
def test_an_include_entry_that_is_not_a_string_is_a_400_naming_it(entry: Any) -> None:
    """An unhashable entry ([] or {}) once reached a set lookup and raised TypeError: a 500."""
    with pytest.raises(InvalidRequest) as err:
        translate({"model": "m", "input": "x", "include": ["reasoning.encrypted_content", entry]})
    assert err.value.param == "include[1]" and err.value.status_code == 400
