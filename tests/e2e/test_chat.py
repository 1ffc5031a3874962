"""Chat completions through the official SDK (sync and async): what a client sees through the gateway."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai

from tests.e2e.conftest import GATEWAY_KEY, PROVIDER_KEY, SDK
from tests.fakes.openai_upstream import REPLY_PREFIX, FakeOpenAIUpstream
from tests.fakes.servers import GatewayServer

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
WEATHER_ARGS = {"city": "city-value", "unit": "celsius"}

HELLO = [{"role": "user", "content": "hello there"}]


async def test_non_streaming(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO)

    assert isinstance(resp, openai.types.chat.ChatCompletion)
    assert resp.model == "chat-model"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == REPLY_PREFIX + "hello there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.completion_tokens == 4
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    seen = upstream.requests_for("gpt-fake")
    assert len(seen) == 1
    assert seen[0].path == "/v1/chat/completions"
    assert seen[0].body["messages"] == HELLO


async def test_upstream_sees_provider_key_never_the_clients(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    await sdk.call("chat.completions.create", model="chat-model", messages=HELLO)

    seen = upstream.requests_for("gpt-fake")[0]
    assert seen.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert GATEWAY_KEY not in json.dumps(seen.headers)


async def test_model_rewritten_and_extra_fields_pass_through(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call(
        "chat.completions.create",
        model="chat-model",
        messages=HELLO,
        extra_body={"repetition_penalty": 1.1, "vendor_options": {"x": [1, 2]}, "provider": {"order": ["fake-a"]}},
    )

    assert resp.model == "chat-model"
    body = upstream.requests_for("gpt-fake")[0].body
    assert body["model"] == "gpt-fake"
    assert body["repetition_penalty"] == 1.1
    assert body["vendor_options"] == {"x": [1, 2]}
    assert "provider" not in body


async def test_model_id_with_a_slash(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call("chat.completions.create", model="org/slash-model", messages=HELLO)

    assert resp.model == "org/slash-model"
    assert upstream.requests_for("slash-upstream")[0].body["model"] == "slash-upstream"


async def test_sampling_parameters_reach_the_upstream(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call(
        "chat.completions.create",
        model="chat-model",
        messages=HELLO,
        n=2,
        seed=1234,
        temperature=0.3,
        top_p=0.9,
        max_tokens=50,
        response_format={"type": "json_object"},
    )

    assert [c.index for c in resp.choices] == [0, 1]
    assert all(json.loads(c.message.content) == {"answer": "ok"} for c in resp.choices)
    body = upstream.requests_for("gpt-fake")[0].body
    assert (body["n"], body["seed"], body["temperature"], body["top_p"], body["max_tokens"]) == (2, 1234, 0.3, 0.9, 50)
    assert body["response_format"] == {"type": "json_object"}


async def test_stop_sequence(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, stop=["there"])

    assert resp.choices[0].message.content == REPLY_PREFIX + "hello "
    assert resp.choices[0].finish_reason == "stop"
    assert upstream.requests_for("gpt-fake")[0].body["stop"] == ["there"]


async def test_max_tokens_gives_length(sdk: SDK) -> None:
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, max_tokens=2)

    assert resp.choices[0].message.content == "You said:"
    assert resp.choices[0].finish_reason == "length"


async def test_logprobs_with_top_logprobs(sdk: SDK) -> None:
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, logprobs=True, top_logprobs=3)

    content = resp.choices[0].logprobs.content
    assert "".join(t.token for t in content) == resp.choices[0].message.content
    assert all(len(t.top_logprobs) == 3 for t in content)
    assert all(t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob for t in content)
    assert all(t.logprob <= 0 for t in content)


async def test_tool_call_non_streaming(sdk: SDK) -> None:
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, tools=[WEATHER_TOOL])

    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    assert call.id.startswith("call_")


# -- streaming -------------------------------------------------------------------------


async def test_streaming_text(sdk: SDK) -> None:
    stream = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, stream=True)
    chunks = await sdk.collect(stream)

    assert all(c.object == "chat.completion.chunk" and c.model == "chat-model" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY_PREFIX + "hello there"
    assert chunks[-1].choices[0].finish_reason == "stop"
    # The gateway asked the upstream for usage, but the client did not: no usage chunk, no usage field.
    assert all(c.usage is None and c.choices for c in chunks)


async def test_streaming_include_usage(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    stream = await sdk.call(
        "chat.completions.create",
        model="chat-model",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = await sdk.collect(stream)

    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens == 4
    assert all(c.usage is None for c in chunks[:-1])
    assert upstream.requests_for("gpt-fake")[0].body["stream_options"] == {"include_usage": True}


async def test_streaming_forces_usage_upstream(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    stream = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, stream=True)
    await sdk.collect(stream)

    assert upstream.requests_for("gpt-fake")[0].body["stream_options"] == {"include_usage": True}


async def test_streaming_tool_call_deltas_reassemble_to_one_call(sdk: SDK) -> None:
    stream = await sdk.call(
        "chat.completions.create", model="chat-model", messages=HELLO, tools=[WEATHER_TOOL], stream=True
    )
    chunks = await sdk.collect(stream)

    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta_call.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta_call.id or ""
            call["name"] += (delta_call.function.name or "") if delta_call.function else ""
            call["arguments"] += (delta_call.function.arguments or "") if delta_call.function else ""
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == WEATHER_ARGS
    assert calls[0]["id"].startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert len(chunks) > 3  # the arguments really arrived in fragments


def test_stream_helper_gives_one_tool_call(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="chat-model", messages=HELLO, tools=[WEATHER_TOOL]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()

    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_ARGS


async def test_async_stream_helper_gives_one_tool_call(aclient: openai.AsyncOpenAI) -> None:
    async with aclient.chat.completions.stream(model="chat-model", messages=HELLO, tools=[WEATHER_TOOL]) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()

    (call,) = final.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_ARGS


async def test_streaming_logprobs(sdk: SDK) -> None:
    stream = await sdk.call(
        "chat.completions.create", model="chat-model", messages=HELLO, stream=True, logprobs=True, top_logprobs=2
    )
    chunks = await sdk.collect(stream)

    tokens = [c.choices[0].logprobs.content[0] for c in chunks if c.choices and c.choices[0].logprobs]
    assert "".join(t.token for t in tokens) == REPLY_PREFIX + "hello there"
    assert all(len(t.top_logprobs) == 2 for t in tokens)


async def test_streaming_n_2(sdk: SDK) -> None:
    stream = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, stream=True, n=2)
    chunks = await sdk.collect(stream)

    texts = {0: "", 1: ""}
    for c in chunks:
        texts[c.choices[0].index] += c.choices[0].delta.content or ""
    assert texts == {0: REPLY_PREFIX + "hello there", 1: REPLY_PREFIX + "hello there"}


async def test_stream_ends_with_done_on_the_wire(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/chat/completions",
            json={"model": "chat-model", "messages": HELLO, "stream": True},
            headers={"authorization": f"Bearer {GATEWAY_KEY}"},
        )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.text.endswith("data: [DONE]\n\n")
    assert resp.text.count("data: [DONE]") == 1


# -- llama.cpp quirks, normalised --------------------------------------------------------


async def test_llamacpp_assistant_turn_without_content_is_accepted(sdk: SDK, llama: FakeOpenAIUpstream) -> None:
    messages: Any = [*HELLO, {"role": "assistant"}, {"role": "user", "content": "again"}]
    answer = await sdk.call("chat.completions.create", model="llama-model", messages=messages)

    assert answer.choices[0].finish_reason == "stop"
    assert llama.requests[-1].body["messages"][1] == {"role": "assistant", "content": ""}


async def test_llamacpp_tool_round_trip_with_null_content(sdk: SDK, llama: FakeOpenAIUpstream) -> None:
    first = await sdk.call("chat.completions.create", model="llama-model", messages=HELLO, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    assert re.fullmatch(r"call_[0-9a-f]{32}", call.id)  # the engine's id, with OpenAI's prefix
    messages = [
        *HELLO,
        first.choices[0].message.model_dump(
            exclude_unset=False, exclude={"refusal", "annotations", "audio", "function_call"}
        ),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'},
    ]
    assert messages[1]["content"] is None  # what the SDK hands back after a tool call

    second = await sdk.call("chat.completions.create", model="llama-model", messages=messages)

    assert second.choices[0].finish_reason == "stop"
    # llama-server takes null content beside tool_calls: sent as it is.
    assert llama.requests[-1].body["messages"][1]["content"] is None
    assert llama.requests[-1].body["messages"][2]["tool_call_id"] == call.id


async def test_llamacpp_streamed_tool_call_ids_get_openais_prefix(sdk: SDK, llama: FakeOpenAIUpstream) -> None:
    stream = await sdk.call("chat.completions.create", model="llama-model", messages=HELLO, tools=[WEATHER_TOOL], stream=True)
    ids = [c.id for chunk in await sdk.collect(stream) if chunk.choices for c in chunk.choices[0].delta.tool_calls or [] if c.id]
    assert len(ids) == 1 and re.fullmatch(r"call_[0-9a-f]{32}", ids[0])
