"""The official `openai` SDK, through the real gateway, against the real SmolLM2 engine.

What the SDK sees, not only the raw JSON: chat (sync and async, streamed and not), logprobs,
forced tool calls (parsed, schema-checked, reassembled by the SDK's stream helper), the tool-result
round trip, `n`, `max_tokens`, `max_completion_tokens`, `stop`, and a clean 400 for what the engine
itself rejects.
"""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from typing import Any

import openai
import pytest

from tests.engine.conftest import MODEL, Gateway

pytestmark = pytest.mark.engine

HELLO = [{"role": "user", "content": "Say hello."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who lives in a river."}]
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Get the weather for a city", "parameters": WEATHER_SCHEMA},
}
FORCE_WEATHER: Any = {"type": "function", "function": {"name": "get_weather"}}
TOOL_TOKENS = 60  # enough for {"city": ..., "unit": ...} under the schema's grammar


def check_schema(value: Any, schema: dict[str, Any], where: str = "arguments") -> None:
    """JSON Schema validation: `jsonschema` when installed, else the subset WEATHER_SCHEMA uses."""
    if importlib.util.find_spec("jsonschema") is not None:
        import jsonschema

        jsonschema.validate(value, schema)
        return
    kinds = {"object": dict, "string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}
    assert isinstance(value, kinds[schema["type"]]), f"{where}: {value!r} is not {schema['type']}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if schema["type"] == "object":
        for name in schema.get("required", ()):
            assert name in value, f"{where}: missing {name!r}"
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(properties), f"{where}: unexpected {set(value) - set(properties)}"
        for name, item in value.items():
            if name in properties:
                check_schema(item, properties[name], f"{where}.{name}")


def check_weather_arguments(arguments: str) -> None:
    check_schema(json.loads(arguments), WEATHER_SCHEMA)


# -- chat -----------------------------------------------------------------------------


def test_chat_non_streaming(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8)

    (choice,) = completion.choices
    assert completion.model == MODEL
    assert choice.message.role == "assistant" and choice.message.content and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None and 0 < completion.usage.completion_tokens <= 8


async def test_chat_streaming_async(gateway: Gateway) -> None:
    async with gateway.async_client() as client:
        stream = await client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=8, stream=True)
        chunks = [chunk async for chunk in stream]

    assert {c.model for c in chunks} == {MODEL} and len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text.strip() and finishes in (["stop"], ["length"])


def test_chat_streaming_sync_helper(client: openai.OpenAI) -> None:
    # T=0, a question SmolLM2 answers in a few tokens, and room to finish: the SDK helper raises
    # LengthFinishReasonError on finish_reason "length" (greedy "Say hello." loops until the limit).
    question = [{"role": "user", "content": "What is the capital of France?"}]
    with client.chat.completions.stream(model=MODEL, messages=question, max_tokens=64, temperature=0) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        final = stream.get_final_completion()

    assert final.choices[0].message.content == "".join(deltas) and "".join(deltas).strip()


# -- logprobs ---------------------------------------------------------------------------


def test_top_logprobs_20_gives_exactly_20_per_token(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=4, logprobs=True, top_logprobs=20, temperature=0
    )

    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    assert completion.usage is not None and len(logprobs.content) == completion.usage.completion_tokens
    for token in logprobs.content:
        assert len(token.top_logprobs) == 20
        assert len({t.token for t in token.top_logprobs}) == 20
        assert token.logprob <= 0 and all(t.logprob <= 0 for t in token.top_logprobs)
        values = [t.logprob for t in token.top_logprobs]
        assert values == sorted(values, reverse=True)
    assert "".join(t.token for t in logprobs.content) == completion.choices[0].message.content


def test_top_logprobs_20_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=20, stream=True, temperature=0
    )
    tokens = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or ()]

    assert len(tokens) == 3
    assert all(len(t.top_logprobs) == 20 for t in tokens)


# -- tool calls --------------------------------------------------------------------------


def test_forced_tool_call_non_streamed(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS
    )

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.function_call is None  # the engine's deprecated twin ("get_weather:") is gone
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    check_weather_arguments(call.function.arguments)


def test_forced_tool_call_with_the_sdk_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS
    ) as stream:
        done = [event for event in stream if event.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()

    assert [event.name for event in done] == ["get_weather"]
    message = final.choices[0].message
    assert message.function_call is None
    (call,) = message.tool_calls or []
    assert call.function.name == "get_weather"  # not "get_weatherget_weather..."
    check_weather_arguments(call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


async def test_forced_tool_call_streamed_deltas_accumulate_to_one_call(gateway: Gateway) -> None:
    # What a hand-written client does: concatenate every fragment by call index.
    async with gateway.async_client() as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER,
            max_tokens=TOOL_TOKENS, stream=True,
        )
        calls: dict[int, dict[str, str]] = defaultdict(lambda: {"id": "", "name": "", "arguments": ""})
        async for chunk in stream:
            for delta_call in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
                call = calls[delta_call.index]
                call["id"] += delta_call.id or ""
                if delta_call.function is not None:
                    call["name"] += delta_call.function.name or ""
                    call["arguments"] += delta_call.function.arguments or ""

    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    check_weather_arguments(calls[0]["arguments"])


def test_the_tool_result_goes_back(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    assistant_turn: Any = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}],
    }
    tool_turn: Any = {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21, "unit": "celsius"}'}

    # As a dict with content None, and as the SDK's own message object (what most code appends).
    for assistant in (assistant_turn, first.choices[0].message):
        answer = client.chat.completions.create(
            model=MODEL, messages=[*WEATHER_Q, assistant, tool_turn], tools=[WEATHER_TOOL], max_tokens=12
        )
        assert answer.choices[0].message.content and answer.choices[0].message.content.strip()


def test_an_assistant_turn_without_content_is_accepted(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "hi"}, {"role": "assistant"}, {"role": "user", "content": "Say hello."}]
    completion = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    assert completion.choices[0].message.content is not None


# -- n, max_tokens, stop -----------------------------------------------------------------


def test_n_2_non_streamed(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=6, n=2, seed=11)

    single = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=1)

    assert [c.index for c in completion.choices] == [0, 1]
    assert [c.finish_reason for c in completion.choices] == ["length", "length"]
    assert all(c.message.content and c.message.content.strip() for c in completion.choices)
    # Two engine requests: usage is their sum (the prompt was processed twice).
    assert completion.usage is not None and single.usage is not None
    assert completion.usage.completion_tokens == 12
    assert completion.usage.prompt_tokens == 2 * single.usage.prompt_tokens


def test_n_2_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=6, n=2, stream=True)
    text: dict[int, str] = defaultdict(str)
    finishes: dict[int, str] = {}
    ids = set()
    for chunk in stream:
        ids.add(chunk.id)
        for choice in chunk.choices:
            text[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason

    assert sorted(text) == [0, 1] and all(text[i].strip() for i in (0, 1))
    assert sorted(finishes) == [0, 1] and len(ids) == 1


def test_max_tokens_is_respected(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=5)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 5


def test_max_completion_tokens_is_respected(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model=MODEL, messages=STORY, max_completion_tokens=4)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 4


def test_stop_is_respected(client: openai.OpenAI) -> None:
    # Greedy decoding is deterministic: the stopped answer is the free answer cut at the stop string.
    free = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=24, temperature=0).choices[0]
    text = free.message.content or ""
    space = text.index(" ", 3)  # a stop string from the middle of the free answer
    stop = text[space : space + 3]
    stopped = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=24, temperature=0, stop=[stop])

    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[: text.index(stop)]
    assert stop not in (stopped.choices[0].message.content or "")


# -- errors --------------------------------------------------------------------------------


def test_what_the_engine_rejects_is_a_clean_400(client: openai.OpenAI) -> None:
    # The gateway accepts json_schema; llama-cpp-python 0.3.36 does not, and answers 500 with a
    # traceback and file paths. The client sees a 400 with the validation message only.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        )
    error = caught.value.body
    assert isinstance(error, dict)
    message = error["message"]
    assert message.startswith("1 validation error:") and "response_format" in message
    assert "Traceback" not in message and 'File "' not in message and "site-packages" not in message
    assert "/work/" not in message and ".py" not in message and "\n" not in message


def test_tool_choice_required_with_one_tool(client: openai.OpenAI) -> None:
    # The engine fails an assert on "required"; with one tool the adapter names it instead.
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=TOOL_TOKENS
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    check_weather_arguments(call.function.arguments)
