"""The official `openai` SDK, through the real gateway, against the real SmolLM2 engine (llama-server).

What the SDK sees, not only the raw JSON: chat (sync and async, streamed and not), usage in
streams, logprobs, tool calls with every `tool_choice` (parsed, schema-checked, reassembled by the
SDK's stream helper), the tool-result round trip, `json_schema`, `n`, `max_tokens`,
`max_completion_tokens`, `stop`, and a clean 400 for what the engine itself rejects.
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
# SmolLM2 writes its arguments with indentation and often makes a second call (celsius, then
# fahrenheit) before it stops: about 45 tokens a call. A call cut inside its arguments is a 500.
TOOL_TOKENS = 200


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


def check_weather_calls(arguments: list[str], finish_reason: str | None) -> None:
    """SmolLM2 often follows its call with more calls until max_tokens: then, as at OpenAI, the last
    one may be cut off (finish_reason "length"). Every other call must be whole and valid."""
    assert arguments, "no tool call"
    whole = arguments[:-1] if finish_reason == "length" and len(arguments) > 1 else arguments
    for args in whole:
        check_weather_arguments(args)


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
    question = [{"role": "user", "content": "What is 2 + 2?"}]
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
        # Exactly k, sorted, each with its bytes (ids, not texts: two tokens may share a text).
        assert len(token.top_logprobs) == 20
        assert token.logprob <= 0 and all(t.logprob <= 0 for t in token.top_logprobs)
        values = [t.logprob for t in token.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert token.bytes is not None and all(t.bytes is not None for t in token.top_logprobs)
        # Greedy: the sampled token is the most likely one.
        assert token.bytes == token.top_logprobs[0].bytes and token.logprob == token.top_logprobs[0].logprob
    content = completion.choices[0].message.content or ""
    assert b"".join(bytes(t.bytes or []) for t in logprobs.content).decode() == content



def test_top_logprobs_20_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=20, stream=True, temperature=0
    )
    tokens = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or ()]

    assert len(tokens) == 3
    assert all(len(t.top_logprobs) == 20 and t.bytes is not None for t in tokens)


@pytest.mark.parametrize("k", [1, 5])
def test_top_logprobs_k_gives_at_most_k_sorted(client: openai.OpenAI, k: int) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=4, logprobs=True, top_logprobs=k, temperature=0.9, seed=5
    )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    for token in logprobs.content:
        values = [t.logprob for t in token.top_logprobs]
        assert len(values) == k and values == sorted(values, reverse=True)


# -- usage in streams ----------------------------------------------------------------------


def test_a_stream_with_include_usage_ends_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL, messages=HELLO, max_tokens=6, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0] is chunks[-1] and chunks[-1].choices == []
    usage = usage_chunks[0].usage
    assert usage is not None and usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 6
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens is not None
    # Without it, no usage chunk (the gateway asks for one upstream for its own accounting).
    plain = list(client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=6, stream=True))
    assert all(c.usage is None for c in plain)


def test_a_repeated_prefix_is_reported_as_cached(client: openai.OpenAI) -> None:
    prefix = "You are a librarian. " + " ".join(f"Shelf {i} holds books about topic {i}." for i in range(60))
    first = client.chat.completions.create(
        model=MODEL, max_tokens=2, messages=[{"role": "system", "content": prefix}, {"role": "user", "content": "Shelf 3?"}]
    )
    again = client.chat.completions.create(
        model=MODEL, max_tokens=2, messages=[{"role": "system", "content": prefix}, {"role": "user", "content": "Shelf 7?"}]
    )
    assert first.usage is not None and again.usage is not None and again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens or 0
    # All of the shared system prompt (some 600 tokens), not the new question.
    assert 0.8 * first.usage.prompt_tokens < cached < again.usage.prompt_tokens


# -- tool calls --------------------------------------------------------------------------


def test_forced_tool_call_non_streamed(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS
    )

    choice = completion.choices[0]
    assert choice.message.function_call is None
    calls = choice.message.tool_calls or []
    assert calls and len({c.id for c in calls}) == len(calls)
    # "length" only when further calls ran into max_tokens (see check_weather_calls).
    assert choice.finish_reason == "tool_calls" or (choice.finish_reason == "length" and len(calls) > 1)
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")  # OpenAI's form, not the engine's
        assert call.function.name == "get_weather"
    check_weather_calls([c.function.arguments for c in calls], choice.finish_reason)


def test_forced_tool_call_with_the_sdk_stream_helper(client: openai.OpenAI) -> None:
    # One call asked for: the SDK's helper parses the final completion, and raises on "length",
    # which SmolLM2's further calls used to reach (llama-server ignores parallel_tool_calls).
    with client.chat.completions.stream(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS,
        parallel_tool_calls=False,
    ) as stream:
        done = [event for event in stream if event.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()

    message = final.choices[0].message
    calls = message.tool_calls or []
    assert [event.name for event in done] == ["get_weather"] and len(calls) == 1
    assert message.function_call is None
    assert calls[0].function.name == "get_weather"  # not "get_weatherget_weather..."
    assert final.choices[0].finish_reason == "tool_calls"
    check_weather_calls([calls[0].function.arguments], "tool_calls")
    assert done[0].arguments == calls[0].function.arguments


async def test_forced_tool_call_streamed_deltas_accumulate_to_one_call(gateway: Gateway) -> None:
    # What a hand-written client does: concatenate every fragment by call index.
    async with gateway.async_client() as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER,
            max_tokens=TOOL_TOKENS, stream=True,
        )
        calls: dict[int, dict[str, str]] = defaultdict(lambda: {"id": "", "name": "", "arguments": ""})
        finish_reason = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish_reason = chunk.choices[0].finish_reason
            for delta_call in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
                call = calls[delta_call.index]
                call["id"] += delta_call.id or ""
                if delta_call.function is not None:
                    call["name"] += delta_call.function.name or ""
                    call["arguments"] += delta_call.function.arguments or ""

    assert list(calls) == list(range(len(calls))) and calls
    for call in calls.values():
        assert call["name"] == "get_weather" and call["id"].startswith("call_") and len(call["id"]) > 5
    check_weather_calls([call["arguments"] for call in calls.values()], finish_reason)


def test_the_tool_result_goes_back(client: openai.OpenAI) -> None:
    # Greedy: a sampled call's arguments are at times not JSON (once in CI: "{"), which llama.cpp
    # cannot render back (the gateway refuses that history with a 400 before sending it).
    first = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS, temperature=0
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    json.loads(call.function.arguments)
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
    # The result reaches the model: a longer result is a longer prompt, by about its length.
    longer = {**tool_turn, "content": '{"temperature": 21, "unit": "celsius", "sky": "' + "clear " * 40 + '"}'}
    short_prompt = client.chat.completions.create(
        model=MODEL, messages=[*WEATHER_Q, assistant_turn, tool_turn], tools=[WEATHER_TOOL], max_tokens=1
    ).usage
    long_prompt = client.chat.completions.create(
        model=MODEL, messages=[*WEATHER_Q, assistant_turn, longer], tools=[WEATHER_TOOL], max_tokens=1
    ).usage
    assert short_prompt is not None and long_prompt is not None
    assert long_prompt.prompt_tokens - short_prompt.prompt_tokens >= 40


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
    # A schema the gateway accepts and llama.cpp cannot compile into a grammar: its own 400.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=HELLO, max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}}}},
        )
    error = caught.value.body
    assert isinstance(error, dict) and "cannot resolve $ref" in error["message"]


def test_response_format_json_schema(client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "rain": {"type": "boolean"}},
              "required": ["city", "rain"], "additionalProperties": False}
    # Greedy: the grammar keeps every token inside the schema, not the answer inside max_tokens (a
    # sampled city name once ran past 40 tokens in CI and the JSON was cut).
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Is it raining in Paris? Answer as JSON."}], max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}}, temperature=0,
    )
    assert completion.choices[0].finish_reason == "stop"
    check_schema(json.loads(completion.choices[0].message.content or ""), schema)


def test_tool_choice_required_with_one_tool(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=TOOL_TOKENS
    )
    calls = completion.choices[0].message.tool_calls or []
    assert calls and all(c.function.name == "get_weather" for c in calls)
    check_weather_calls([c.function.arguments for c in calls], completion.choices[0].finish_reason)



def test_tool_choice_required_among_several_tools(client: openai.OpenAI) -> None:
    # The active tool-call probe's suite forces a call among several tools.
    time_tool: Any = {"type": "function", "function": {"name": "get_time", "description": "Get the time in a city",
                                                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                                      "required": ["city"]}}}
    for stream in (False, True):
        if stream:
            with client.chat.completions.stream(
                model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL, time_tool], tool_choice="required", max_tokens=TOOL_TOKENS,
                temperature=0,
            ) as events:
                final = events.get_final_completion()
        else:
            final = client.chat.completions.create(
                model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL, time_tool], tool_choice="required", max_tokens=TOOL_TOKENS,
                temperature=0,
            )
        choice = final.choices[0]
        assert choice.finish_reason == "tool_calls"
        calls = choice.message.tool_calls or []
        assert calls and all(c.function.name in ("get_weather", "get_time") for c in calls)
        for call in calls:
            json.loads(call.function.arguments)


def test_tool_choice_named_among_several_tools_calls_that_one(client: openai.OpenAI) -> None:
    time_tool: Any = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    completion = client.chat.completions.create(
        model=MODEL, messages=WEATHER_Q, tools=[time_tool, WEATHER_TOOL], tool_choice=FORCE_WEATHER, max_tokens=TOOL_TOKENS
    )
    calls = completion.choices[0].message.tool_calls or []
    assert calls and all(c.function.name == "get_weather" for c in calls)  # never get_time
    check_weather_arguments(calls[0].function.arguments)


@pytest.mark.parametrize("tool_choice", [None, "auto"])
def test_tools_with_auto_are_shown_to_the_model(client: openai.OpenAI, tool_choice: Any) -> None:
    # OpenAI's default: the model may call a tool or answer. SmolLM2-135M answers in text here; the
    # tools are in its prompt all the same (the engine ignored them with the GGUF's own template).
    extra: dict[str, Any] = {} if tool_choice is None else {"tool_choice": tool_choice}
    with_tools = client.chat.completions.create(model=MODEL, messages=WEATHER_Q, tools=[WEATHER_TOOL], max_tokens=8, **extra)
    without = client.chat.completions.create(model=MODEL, messages=WEATHER_Q, max_tokens=8)
    assert with_tools.usage is not None and without.usage is not None
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens + 50
    message = with_tools.choices[0].message
    assert message.content or message.tool_calls


def test_history_with_arguments_the_engine_cannot_parse_is_a_400_not_an_engine_failure(client: openai.OpenAI) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{"}}
    history: Any = [*WEATHER_Q, {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER_TOOL], max_tokens=4)
    assert "messages[1].tool_calls[0].function.arguments" in str(refused.value)
    # The engine was not blamed: the next request is answered.
    assert client.chat.completions.create(model=MODEL, messages=WEATHER_Q, max_tokens=2).choices[0].message.content is not None
