import itertools
import json

import pytest
from llama_cpp.llama_grammar import LlamaGrammar

from probes.testbed.tools import (
    ToolRequestError,
    chosen_tools,
    history_as_text,
    parse_tool_calls,
    tool_grammar,
    tool_system_prompt,
    validate_tools,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def test_tool_choice_modes() -> None:
    assert chosen_tools([WEATHER, ADD], None) == ([WEATHER, ADD], "auto")
    assert chosen_tools([WEATHER, ADD], "auto") == ([WEATHER, ADD], "auto")
    assert chosen_tools([WEATHER, ADD], "required") == ([WEATHER, ADD], "required")
    assert chosen_tools([WEATHER, ADD], "none") == ([], "none")
    assert chosen_tools([WEATHER, ADD], {"type": "function", "function": {"name": "add"}}) == ([ADD], "required")
    assert chosen_tools([], None) == ([], "none")


@pytest.mark.parametrize(
    ("tools", "choice"),
    [([WEATHER], {"type": "function", "function": {"name": "nope"}}), ([WEATHER], "sometimes"), ([], "required")],
)
def test_bad_tool_choice(tools: list, choice: object) -> None:
    with pytest.raises(ToolRequestError):
        chosen_tools(tools, choice)


@pytest.mark.parametrize(
    "tools", ["x", [{"type": "function"}], [{"type": "function", "function": {"name": "has space"}}]]
)
def test_bad_tools(tools: object) -> None:
    with pytest.raises(ToolRequestError):
        validate_tools(tools)


def test_no_grammar_without_a_call_to_make() -> None:
    assert tool_grammar([WEATHER], "none", False) is None
    assert tool_grammar([], "auto", False) is None


@pytest.mark.parametrize(("mode", "parallel"), list(itertools.product(["required", "auto"], [False, True])))
def test_grammars_compile(mode: str, parallel: bool) -> None:
    grammar = tool_grammar([WEATHER, ADD], mode, parallel)
    assert grammar is not None and grammar.count("root ::=") == 1
    assert '"get_weather"' in grammar.replace('\\"', '"') and ("free-text" in grammar) == (mode == "auto")
    LlamaGrammar.from_string(grammar, verbose=False)


def test_system_prompt_lists_the_tools() -> None:
    text = tool_system_prompt([WEATHER, ADD], "required")
    assert "get_weather" in text and '"a"' in text and "must" in text


def test_parse_calls() -> None:
    ids = iter(["call_a", "call_b"])
    text = '[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {}}]'
    calls = parse_tool_calls(text, lambda: next(ids))
    assert calls is not None and [c["id"] for c in calls] == ["call_a", "call_b"]
    assert calls[0]["type"] == "function" and json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    one = parse_tool_calls(' {"name": "add", "arguments": {"a": 1, "b": 2}}', lambda: "c")
    assert one is not None and one[0]["function"]["name"] == "add"


@pytest.mark.parametrize("text", ["Hello there", '{"name": ', '{"arguments": {}}', "[]", '["add"]'])
def test_text_is_not_a_call(text: str) -> None:
    assert parse_tool_calls(text, lambda: "c") is None


def test_history_renders_tool_turns_as_text() -> None:
    messages = [
        {"role": "system", "content": "tools..."},
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "add 1 and 2"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "3"},
    ]
    out = history_as_text(messages)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"] == "tools...\n\nbe brief"
    assert out[1]["content"] == "add 1 and 2"
    assert json.loads(out[2]["content"]) == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert out[3]["content"] == "Tool result: 3"


def test_raw_newlines_inside_argument_strings_come_back_as_valid_json() -> None:
    calls = parse_tool_calls('{"name": "note", "arguments": {"text": "two\nlines"}}', lambda: "call_1")
    assert calls is not None
    assert json.loads(calls[0]["function"]["arguments"]) == {"text": "two\nlines"}
