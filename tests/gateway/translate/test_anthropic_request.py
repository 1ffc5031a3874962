"""Messages request -> chat request: each field's mapping, and 400s that name the Messages field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate.anthropic_request import carried, to_chat
from kernel.errors import InvalidRequest, UnsupportedParameter

TOOL = {"name": "get_weather", "description": "Weather for a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], **fields}


def test_a_plain_request() -> None:
    chat = to_chat(body()).body
    assert chat == {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


def test_system_string_and_blocks_become_one_leading_system_message() -> None:
    assert to_chat(body(system="be brief")).body["messages"][0] == {"role": "system", "content": "be brief"}
    blocks = [{"type": "text", "text": "one", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "two"}]
    assert to_chat(body(system=blocks)).body["messages"][0] == {"role": "system", "content": "one\n\ntwo"}


def test_sampling_stop_metadata_and_stream() -> None:
    chat = to_chat(
        body(temperature=0.2, top_p=0.9, top_k=40, stop_sequences=["END", "\n\n"], metadata={"user_id": "u-1"}, stream=True)
    ).body
    assert chat["temperature"] == 0.2 and chat["top_p"] == 0.9 and chat["top_k"] == 40
    assert chat["stop"] == ["END", "\n\n"]
    assert chat["user"] == "u-1"
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}


def test_structured_output_becomes_a_json_schema_response_format() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    chat = to_chat(body(output_config={"effort": "low", "format": {"type": "json_schema", "schema": schema}})).body
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert "response_format" not in to_chat(body(output_config={"effort": "high"})).body


def test_tools_and_each_tool_choice() -> None:
    chat = to_chat(body(tools=[TOOL])).body
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": TOOL["input_schema"]}}
    ]
    assert "tool_choice" not in chat
    expected = {
        "auto": "auto",
        "any": "required",
        "none": "none",
    }
    for kind, chat_choice in expected.items():
        assert to_chat(body(tools=[TOOL], tool_choice={"type": kind})).body["tool_choice"] == chat_choice
    named = to_chat(body(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})).body
    assert named["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert named["parallel_tool_calls"] is False


def test_a_tool_use_and_tool_result_round_trip_becomes_tool_calls_then_a_tool_message() -> None:
    messages = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "...", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]
    chat = to_chat(body(messages=messages, tools=[TOOL])).body["messages"]
    assert chat[1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}],
    }
    assert chat[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"}
    assert chat[3] == {"role": "user", "content": "and tomorrow?"}
    assert json.loads(chat[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_an_assistant_turn_of_tool_calls_only_has_null_content() -> None:
    turn = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]}
    chat = to_chat(body(messages=[{"role": "user", "content": "x"}, turn])).body["messages"][1]
    assert chat["content"] is None and chat["tool_calls"][0]["function"]["arguments"] == "{}"


def test_an_error_tool_result_says_so_and_its_images_follow_as_user_content() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "boom"}, image], "is_error": True}
    chat = to_chat(body(messages=[{"role": "user", "content": [result]}])).body["messages"]
    assert chat[0] == {"role": "tool", "tool_call_id": "t", "content": "Error: boom"}
    assert chat[1] == {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]}


def test_images_pass_through_as_image_url_parts() -> None:
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
    ]
    chat = to_chat(body(messages=[{"role": "user", "content": content}])).body["messages"][0]
    assert chat["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]


def test_thinking_is_asked_for_by_enabled_or_adaptive() -> None:
    assert to_chat(body(thinking={"type": "enabled", "budget_tokens": 1024})).thinking
    assert to_chat(body(thinking={"type": "adaptive"})).thinking
    assert not to_chat(body(thinking={"type": "disabled"})).thinking and not to_chat(body()).thinking
    assert "thinking" not in to_chat(body(thinking={"type": "enabled", "budget_tokens": 1024})).body


def test_count_tokens_needs_no_max_tokens_but_messages_does() -> None:
    request = body()
    del request["max_tokens"]
    assert "max_tokens" not in to_chat(request, counting=True).body
    with pytest.raises(InvalidRequest) as caught:
        to_chat(request)
    assert caught.value.param == "max_tokens" and caught.value.status_code == 400


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "16"}, "max_tokens"),
        ({"model": ""}, "model"),
        ({"model": 7}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": "x"}}]}]}, "messages[0].content[0].source.media_type"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "file:///etc/passwd"}}]}]}, "messages[0].content[0].source.url"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 5}]}]}, "messages[0].content[0].tool_use_id"),
        ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]}, "messages[0].content[0].input"),
        ({"system": [{"type": "image"}]}, "system[0].type"),
        ({"system": 3}, "system"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"stop_sequences": [""]}, "stop_sequences[0]"),
        ({"stream": "yes"}, "stream"),
        ({"metadata": {"user_id": 1}}, "metadata.user_id"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tools": [{"name": "bad name", "input_schema": {}}]}, "tools[0].name"),
        ({"tools": [{"name": "f", "input_schema": []}]}, "tools[0].input_schema"),
        ({"tools": [TOOL], "tool_choice": {"type": "required"}}, "tool_choice.type"),
        ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "other"}}, "tool_choice.name"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"provider": {"sort": "cheapest"}}, "provider.sort"),
        ({"thinking": {"type": "on"}}, "thinking.type"),
        ({"thinking": True}, "thinking"),
        ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format.type"),
        ({"output_config": {"format": {"type": "json_schema", "schema": "x"}}}, "output_config.format.schema"),
    ],
)
def test_hostile_input_is_a_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        to_chat(body(**fields))
    assert caught.value.status_code == 400
    assert caught.value.param == param
    assert param in caught.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages[0].content[0].type"),
        ({"mcp_servers": [{"type": "url", "url": "https://x"}]}, "mcp_servers"),
    ],
)
def test_what_has_no_chat_equivalent_is_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(UnsupportedParameter) as caught:
        to_chat(body(**fields))
    assert caught.value.param == param and caught.value.status_code == 400


# -- any JSON at all: a 400 or a chat request, never another exception ------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.sampled_from(["", "x", "text", "image", "tool_use", "tool_result", "user", "assistant", "auto", "tool", "base64", "url", "image/png"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "text", "role", "content", "source", "name", "input", "id", "tool_use_id", "is_error", "media_type", "data", "url", "input_schema"]), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(["thinking", "output_config", "model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "stream", "provider"])


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.dictionaries(FIELDS, JSON, max_size=6), st.booleans())
def test_any_body_is_translated_or_refused_with_a_named_400(fields: dict[str, Any], counting: bool) -> None:
    try:
        request = to_chat(body(**fields), counting=counting)
    except InvalidRequest as exc:
        assert exc.status_code == 400 and exc.param is not None
        return
    assert request.body["messages"] and request.model


def test_the_carried_view_leaves_out_what_chat_refuses_and_nothing_else() -> None:
    server_tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "note"}}
    raw = body(
        tools=[server_tool, TOOL],
        tool_choice={"type": "tool", "name": "web_search"},
        mcp_servers=[{"type": "url", "url": "https://mcp.example", "name": "x"}],
        messages=[
            {"role": "user", "content": [document]},
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}}, {"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "and?"}, document]},
        ],
    )
    with pytest.raises(UnsupportedParameter):
        to_chat(raw)
    view = to_chat(carried(raw)).body
    assert [t["function"]["name"] for t in view["tools"]] == ["get_weather"] and "tool_choice" not in view
    # What chat cannot hold stays as text of its size: the prompt estimate remains an upper bound.
    doc, tool_use = json.dumps(document, separators=(",", ":")), json.dumps(raw["messages"][1]["content"][0], separators=(",", ":"))
    assert [(m["role"], m["content"]) for m in view["messages"]] == [
        ("user", doc),
        ("assistant", tool_use + "ok"),
        ("user", "and?\n" + doc),
    ]
    assert carried(body(tools=[TOOL], tool_choice={"type": "any"})) == body(tools=[TOOL], tool_choice={"type": "any"})
    with pytest.raises(InvalidRequest, match="max_tokens"):  # malformed input is still refused
        to_chat(carried({**raw, "max_tokens": "many"}))


def test_a_big_document_keeps_the_carried_views_prompt_as_big() -> None:
    data = "QUJD" * 240_000  # 960 kB of base64
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}
    view = to_chat(carried(body(messages=[{"role": "user", "content": [document, {"type": "text", "text": "Summarise"}]}]))).body
    assert len(json.dumps(view["messages"])) > len(data)
