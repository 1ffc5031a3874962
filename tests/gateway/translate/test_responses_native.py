"""The body a passed-through Responses request sends upstream, the stored chat view as input items,
the gateway's part of the answer, and the chat view of what the translation refuses."""

from __future__ import annotations

import json
from typing import Any

from gateway.translate.responses_native import carried, items_from_chat, own, upstream_body
from gateway.translate.responses_request import translate

BODY: dict[str, Any] = {
    "model": "m",
    "input": "next?",
    "previous_response_id": "resp_1",
    "store": True,
    "new": {"x": 1},
}


def test_the_upstream_keeps_nothing_and_gets_the_conversation_as_input() -> None:
    history = [{"type": "message", "role": "user", "content": "first"}]
    assert upstream_body(BODY, history) == {
        "model": "m",
        "input": [*history, {"type": "message", "role": "user", "content": "next?"}],
        "store": False,
        "new": {"x": 1},
    }
    items = [{"type": "message", "role": "user", "content": "a"}]
    assert upstream_body({"model": "m", "input": items}, None) == {"model": "m", "input": items, "store": False}


def test_a_chat_conversation_becomes_input_items() -> None:
    conversation = [
        {"role": "system", "content": "dev note"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "u", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{}"}}],
        },
    ]
    assert items_from_chat(conversation) == [
        {"type": "message", "role": "system", "content": "dev note"},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "u", "detail": "low"},
            ],
        },
        {"type": "message", "role": "assistant", "content": "calling"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
    ]


def test_the_answer_carries_the_gateways_id_model_store_and_chain() -> None:
    response = {"id": "resp_up", "model": "gpt-up", "store": False, "previous_response_id": None, "output": []}
    own(response, "resp_gw", "public", {"store": True, "previous_response_id": "resp_1"})
    assert response == {
        "id": "resp_gw",
        "model": "public",
        "store": True,
        "previous_response_id": "resp_1",
        "output": [],
    }


def test_a_big_file_keeps_the_chat_views_prompt_as_big() -> None:
    data = "data:application/pdf;base64," + "QUJD" * 240_000
    file = {"type": "input_file", "filename": "a.pdf", "file_data": data}
    view = translate(carried({"model": "m", "input": [{"role": "user", "content": [file, {"type": "input_text", "text": "Sum up"}]}]}))
    assert len(json.dumps(view.body["messages"])) > len(data)


def test_the_chat_view_leaves_out_what_the_translation_refuses() -> None:
    body = {
        "model": "m",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hi"}, {"type": "input_file", "file_id": "f"}],
            },
            {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
        "tools": [{"type": "web_search"}, {"type": "function", "name": "f"}],
        "tool_choice": {"type": "web_search"},
        "max_tool_calls": 3,
    }
    view = carried(body)
    assert (
        view["tools"] == [{"type": "function", "name": "f"}]
        and "tool_choice" not in view
        and "max_tool_calls" not in view
    )
    assert [i["type"] for i in view["input"]] == ["message", "message", "reasoning"]
    chat = translate(view)  # accepted now, what it cannot hold as text of its size (an upper bound for the estimate)
    assert chat.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": '{"type":"input_file","file_id":"f"}'}]},
        {"role": "user", "content": [{"type": "text", "text": '{"type":"web_search_call","id":"ws_1","status":"completed"}'}]},
    ]
    assert (
        carried({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "required"}).get(
            "tool_choice"
        )
        is None
    )
