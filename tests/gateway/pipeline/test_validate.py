"""Request validation: every error is an InvalidRequest naming the exact `param`."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.pipeline.validate import parse_json, validate
from kernel.errors import InvalidRequest

DROP = object()
USER = {"role": "user", "content": "hi"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def body(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def chat(**changes: Any) -> dict[str, Any]:
    return body({"model": "m", "messages": [USER]}, **changes)


def completion(**changes: Any) -> dict[str, Any]:
    return body({"model": "m", "prompt": "Once"}, **changes)


def embedding(**changes: Any) -> dict[str, Any]:
    return body({"model": "m", "input": "text"}, **changes)


# -- parse_json --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [(b"", "empty"), (b'{"model": ', "could not parse"), (b"[1]", "JSON object"), (b'"s"', "JSON object")],
)
def test_parse_json_errors(raw: bytes, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_json(raw)
    assert fragment in info.value.message
    assert info.value.status_code == 400 and info.value.param is None


def test_parse_json() -> None:
    assert parse_json(b'{"model": "m", "x": [1]}') == {"model": "m", "x": [1]}


# -- chat -----------------------------------------------------------------------------------

CHAT_ERRORS = [
    (chat(model=DROP), "model"),
    (chat(model=7), "model"),
    (chat(model=""), "model"),
    (chat(messages=DROP), "messages"),
    (chat(messages={"role": "user"}), "messages"),
    (chat(messages=[]), "messages"),
    (chat(messages=[USER, "hi"]), "messages[1]"),
    (chat(messages=[{"content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
    (chat(messages=[{"role": "user"}]), "messages[0].content"),
    (chat(messages=[{"role": "system", "content": None}]), "messages[0].content"),
    (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (
        chat(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]),
        "messages[0].content[1]",
    ),
    (chat(messages=[USER, {"role": "tool", "content": "x"}]), "messages[1].tool_call_id"),
    (chat(messages=[{"role": "assistant", "content": None, "tool_calls": {"id": "x"}}]), "messages[0].tool_calls"),
    (
        chat(messages=[{"role": "assistant", "content": None, "tool_calls": [{"id": "x", "function": {}}]}]),
        "messages[0].tool_calls[0].function",
    ),
    (chat(stream="yes"), "stream"),
    (chat(stream=True, stream_options=[]), "stream_options"),
    (chat(stream_options={"include_usage": True}), "stream_options"),
    (chat(stream=True, stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (chat(temperature="hot"), "temperature"),
    (chat(temperature=True), "temperature"),
    (chat(temperature=2.5), "temperature"),
    (chat(temperature=-0.1), "temperature"),
    (chat(top_p=1.1), "top_p"),
    (chat(presence_penalty=-3), "presence_penalty"),
    (chat(frequency_penalty=2.01), "frequency_penalty"),
    (chat(n=0), "n"),
    (chat(n=129), "n"),
    (chat(n=2.0), "n"),
    (chat(n=True), "n"),
    (chat(max_tokens=0), "max_tokens"),
    (chat(max_completion_tokens=0), "max_completion_tokens"),
    (chat(seed="42"), "seed"),
    (chat(seed=2**63), "seed"),
    (chat(logit_bias=[1]), "logit_bias"),
    (chat(user=1), "user"),
    (chat(stop=5), "stop"),
    (chat(stop=["a", 1]), "stop"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (chat(logprobs="true"), "logprobs"),
    (chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (chat(logprobs=True, top_logprobs=-1), "top_logprobs"),
    (chat(top_logprobs=2), "top_logprobs"),
    (chat(logprobs=False, top_logprobs=2), "top_logprobs"),
    (chat(tools={"type": "function"}), "tools"),
    (chat(tools=[TOOL, {"type": "retrieval"}]), "tools[1].type"),
    (chat(tools=["get_weather"]), "tools[0].type"),
    (chat(tools=[{"type": "function"}]), "tools[0].function"),
    (chat(tools=[{"type": "function", "function": {"name": "has space"}}]), "tools[0].function.name"),
    (chat(tools=[{"type": "function", "function": {"name": "x" * 65}}]), "tools[0].function.name"),
    (chat(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0].function.name"),
    (chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "{}"}}]), "tools[0].function.parameters"),
    (chat(tools=[TOOL], tool_choice="always"), "tool_choice"),
    (chat(tool_choice="required"), "tool_choice"),
    (chat(tools=[TOOL], tool_choice={"type": "function"}), "tool_choice"),
    (chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "other"}}), "tool_choice"),
    (chat(tools=[TOOL], tool_choice=3), "tool_choice"),
    (chat(parallel_tool_calls="no"), "parallel_tool_calls"),
    (chat(response_format="json"), "response_format"),
    (chat(response_format={"type": "yaml"}), "response_format.type"),
    (chat(response_format={}), "response_format.type"),
    (chat(response_format={"type": "json_schema"}), "response_format.json_schema"),
]


@pytest.mark.parametrize(("request_body", "param"), CHAT_ERRORS, ids=[p for _, p in CHAT_ERRORS])
def test_chat_errors(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate("chat", request_body)
    err = info.value
    assert err.param == param
    assert (err.status_code, err.error_type) == (400, "invalid_request_error")
    # The message names the field, or (OpenAI's wording for enums) the rejected value.
    assert param.split("[")[0].split(".")[0] in err.message or err.message.startswith("Invalid value: ")


CHAT_VALID = [
    chat(),
    chat(messages=[{"role": "system", "content": "s"}, {"role": "developer", "content": "d"}, USER]),
    chat(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}],
            }
        ]
    ),
    chat(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]
    ),
    chat(messages=[USER, {"role": "assistant", "content": None}]),
    chat(stream=True, stream_options={"include_usage": True}),
    chat(temperature=0, top_p=1, presence_penalty=-2, frequency_penalty=2, n=128, max_tokens=1, seed=-1, stop="x"),
    chat(stop=["a", "b", "c", "d"], logit_bias={"50256": -100}, user="u"),
    chat(logprobs=True, top_logprobs=0),
    chat(logprobs=True, top_logprobs=20),
    chat(tools=[TOOL], tool_choice="required", parallel_tool_calls=False),
    chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
    chat(tools=[{"function": {"name": "no_type-given"}}]),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
    chat(temperature=None, max_tokens=None, stream=None),
    chat(vendor_extension={"anything": [1, 2]}, provider={"order": ["a"]}),
]


@pytest.mark.parametrize("request_body", CHAT_VALID)
def test_chat_valid(request_body: dict[str, Any]) -> None:
    snapshot = repr(request_body)
    assert validate("chat", request_body) is request_body
    assert repr(request_body) == snapshot  # not rewritten: unknown fields pass through untouched


# -- completions --------------------------------------------------------------------------------

COMPLETION_ERRORS = [
    (completion(model=DROP), "model"),
    (completion(prompt=DROP), "prompt"),
    (completion(prompt=[]), "prompt"),
    (completion(prompt=["a", 1]), "prompt"),
    (completion(prompt=[[1, 2], []]), "prompt"),
    (completion(prompt={"text": "a"}), "prompt"),
    (completion(prompt=[True, False]), "prompt"),
    (completion(logprobs=21), "logprobs"),
    (completion(logprobs=True), "logprobs"),
    (completion(best_of=0), "best_of"),
    (completion(echo="yes"), "echo"),
    (completion(suffix=1), "suffix"),
    (completion(temperature=3), "temperature"),
    (completion(stream_options={"include_usage": True}), "stream_options"),
]


@pytest.mark.parametrize(("request_body", "param"), COMPLETION_ERRORS, ids=[p for _, p in COMPLETION_ERRORS])
def test_completion_errors(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate("completions", request_body)
    assert info.value.param == param


@pytest.mark.parametrize(
    "prompt", ["text", ["a", "b"], [1, 2, 3], [[1, 2], [3]]], ids=["string", "strings", "tokens", "token-arrays"]
)
def test_completion_prompt_forms(prompt: Any) -> None:
    validate("completions", completion(prompt=prompt, logprobs=5, echo=True, best_of=2, suffix="s"))


def test_a_completion_prompt_array_is_capped_but_a_token_array_is_one_prompt() -> None:
    validate("completions", completion(prompt=["p"] * 3), max_prompts=3)
    validate("completions", completion(prompt=list(range(10))), max_prompts=3)  # one prompt of 10 tokens
    for prompt in (["p"] * 4, [[1]] * 4):
        with pytest.raises(InvalidRequest) as info:
            validate("completions", completion(prompt=prompt), max_prompts=3)
        assert info.value.param == "prompt" and info.value.status_code == 400 and "at most 3" in info.value.message


# -- embeddings ---------------------------------------------------------------------------------

EMBEDDING_ERRORS = [
    (embedding(model=DROP), "model"),
    (embedding(input=DROP), "input"),
    (embedding(input=""), None),
    (embedding(input=[]), "input"),
    (embedding(input=3), "input"),
    (embedding(encoding_format="int8"), "encoding_format"),
    (embedding(dimensions=0), "dimensions"),
    (embedding(dimensions="8"), "dimensions"),
    (embedding(stream=True), "stream"),
]


@pytest.mark.parametrize(("request_body", "param"), EMBEDDING_ERRORS, ids=[str(p) for _, p in EMBEDDING_ERRORS])
def test_embedding_errors(request_body: dict[str, Any], param: str | None) -> None:
    if param is None:  # an empty string is a valid (if pointless) input
        validate("embeddings", request_body)
        return
    with pytest.raises(InvalidRequest) as info:
        validate("embeddings", request_body)
    assert info.value.param == param


@pytest.mark.parametrize("fmt", ["float", "base64", None])
def test_embedding_valid(fmt: str | None) -> None:
    validate("embeddings", embedding(input=["a", "b"], encoding_format=fmt, dimensions=8))


# -- nesting depth ----------------------------------------------------------------------------


def nested(depth: int, leaf: Any = None) -> Any:
    """An object `depth` levels deep: {"a": {"a": ... leaf}}."""
    value: Any = leaf if leaf is not None else {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_tool(depth: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "f", "parameters": nested(depth)}}


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (chat(tools=[TOOL, deep_tool(300)]), "tools[1].function.parameters"),
        (chat(metadata=nested(300)), "metadata.a.a.a"),
        (chat(messages=[USER, {"role": "user", "content": [{"type": "text", "x": nested(300)}]}]), "messages[1].content[0]"),
        (embedding(input=[[1, 2]], extra=[[[[nested(200)]]]]), "extra[0][0][0]"),
    ],
)
def test_bodies_nested_past_the_limit_name_the_field(request_body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate("embeddings" if "input" in request_body else "chat", request_body, max_depth=64)
    assert info.value.status_code == 400
    assert info.value.param == param
    assert "64" in info.value.message and param in info.value.message


def test_depth_at_the_limit_passes_and_one_more_fails() -> None:
    # The body is level 1, "metadata"'s object level 2: 63 more levels fit in 64.
    validate("chat", chat(metadata=nested(63)), max_depth=64)
    with pytest.raises(InvalidRequest):
        validate("chat", chat(metadata=nested(64)), max_depth=64)
    validate("chat", chat(metadata=nested(64)), max_depth=65)


def test_wide_flat_bodies_are_not_deep() -> None:
    validate("embeddings", embedding(input=[[1] * 10 for _ in range(1000)]), max_depth=3)
