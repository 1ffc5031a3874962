"""A Chat Completions client (the official `openai` SDK) in front of an Anthropic Messages upstream
(the strict fake in tests/fakes/anthropic_upstream.py), and a Messages client (`anthropic` SDK) in
front of the same upstream through both translations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.app import create_app
from gateway.config import Settings, load_config
from tests.e2e.conftest import GATEWAY_KEY, RETRY, TIMEOUTS
from tests.fakes.anthropic_upstream import FakeAnthropicUpstream
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

ANTHROPIC_KEY = "sk-ant-fake-upstream-0005"
ANTHROPIC_KEY_ENV = "FAKE_ANTHROPIC_KEY"
HELLO = [{"role": "user", "content": "Say hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
EXPECTED_ARGS = {"city": "city-value", "unit": "celsius", "days": 1}
CAPS = {"logprobs": False, "native_n": False, "modes": ["chat"]}


def settings(anthropic_url: str, openai_url: str) -> Settings:
    return load_config(
        environ={ANTHROPIC_KEY_ENV: ANTHROPIC_KEY},
        auth={"keys": [{"name": "plain", "key": GATEWAY_KEY}]},
        timeouts=TIMEOUTS,
        retry=RETRY,
        breaker={"min_requests": 1000},
        providers=[
            {"name": "anth", "kind": "anthropic", "base_url": anthropic_url, "api_key_env": ANTHROPIC_KEY_ENV},
            {"name": "oai", "kind": "openai", "base_url": openai_url},
        ],
        deployments=[
            {"model": "claude", "provider": "anth", "upstream_model": "claude-fake", "capabilities": CAPS},
            {"model": "claude-cut", "provider": "anth", "upstream_model": "c@cut:4", "capabilities": CAPS},
            {"model": "claude-overloaded-event", "provider": "anth", "upstream_model": "c@error-event:4", "capabilities": CAPS},
            {"model": "claude-rejects", "provider": "anth", "upstream_model": "c@status:400", "capabilities": CAPS},
            {"model": "overloaded", "provider": "anth", "upstream_model": "c@status:529;retry-after=0", "capabilities": CAPS},
        ],
    )


@pytest.fixture(scope="module")
def anthropic_upstream(servers: BackgroundLoop) -> Iterator[FakeAnthropicUpstream]:
    upstream = servers.call(FakeAnthropicUpstream(cached_tokens=3).start())
    yield upstream
    servers.call(upstream.stop())


@pytest.fixture(scope="module")
def gateway(servers: BackgroundLoop, anthropic_upstream: FakeAnthropicUpstream, upstream_server: FakeOpenAIUpstream) -> Iterator[GatewayServer]:
    server = GatewayServer(create_app(settings(anthropic_upstream.url, upstream_server.url)), servers).start()
    yield server
    server.stop()


@pytest.fixture
def upstream(anthropic_upstream: FakeAnthropicUpstream) -> FakeAnthropicUpstream:
    anthropic_upstream.reset()
    return anthropic_upstream


@pytest.fixture
def client(gateway: GatewayServer, upstream: FakeAnthropicUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.url, api_key=GATEWAY_KEY, max_retries=0, timeout=10) as c:
        yield c


def test_chat_create_is_answered_by_the_messages_upstream(client: openai.OpenAI, upstream: FakeAnthropicUpstream) -> None:
    reply = client.chat.completions.create(
        model="claude", messages=[{"role": "system", "content": "Be brief."}, *HELLO], max_tokens=32, temperature=1.5  # type: ignore[list-item]
    )
    assert reply.choices[0].message.content == "You said: Say hello"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "claude"
    sent = upstream.requests[-1]
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body["system"] == "Be brief." and sent.body["temperature"] == 1.0 and sent.body["max_tokens"] == 32
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == (2 + 4) + 2 and reply.usage.completion_tokens == 4
    assert reply.usage.prompt_tokens_details is not None and reply.usage.prompt_tokens_details.cached_tokens == 3


def test_chat_stream_text_equals_the_answer(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(model="claude", messages=HELLO, max_tokens=32)  # type: ignore[arg-type]
    chunks = list(
        client.chat.completions.create(model="claude", messages=HELLO, max_tokens=32, stream=True, stream_options={"include_usage": True})  # type: ignore[arg-type]
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_a_streamed_tool_call_reassembled_by_the_sdk_equals_the_whole_one(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "claude", "messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS, "max_tokens": 64}
    whole = client.chat.completions.create(**kwargs)
    with client.chat.completions.stream(**kwargs) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    [expected] = whole.choices[0].message.tool_calls or []
    [call] = final.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == json.loads(expected.function.arguments) == EXPECTED_ARGS  # type: ignore[union-attr]
    assert call.function.name == expected.function.name == "get_weather"  # type: ignore[union-attr]
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason == "tool_calls"


def test_a_tool_round_trip_passes_the_strict_upstream(client: openai.OpenAI, upstream: FakeAnthropicUpstream) -> None:
    question = {"role": "user", "content": "weather?"}
    first = client.chat.completions.create(model="claude", messages=[question], tools=TOOLS, max_tokens=64)  # type: ignore[list-item,arg-type]
    [call] = first.choices[0].message.tool_calls or []
    messages: list[Any] = [
        question,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C"},
    ]
    second = client.chat.completions.create(model="claude", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=64)  # type: ignore[arg-type]
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content == "You said: weather?"
    sent = upstream.requests[-1].body["messages"]
    assert sent[1]["content"] == [{"type": "tool_use", "id": call.id, "name": "get_weather", "input": EXPECTED_ARGS}]
    assert sent[2] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]}


@pytest.mark.parametrize("model", ["claude-cut", "claude-overloaded-event"])
def test_a_stream_cut_midway_raises_in_the_openai_sdk(client: openai.OpenAI, model: str) -> None:
    chunks: list[Any] = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model=model, messages=HELLO, max_tokens=32, stream=True):  # type: ignore[arg-type]
            chunks.append(chunk)
    assert chunks and not any(c.choices and c.choices[0].finish_reason for c in chunks)


def test_upstream_refusals_and_overload(client: openai.OpenAI, upstream: FakeAnthropicUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as rejected:
        client.chat.completions.create(model="claude-rejects", messages=HELLO, max_tokens=8)  # type: ignore[arg-type]
    assert rejected.value.body["message"] == "fake upstream error 400"  # type: ignore[index]  # Anthropic's message, passed on
    assert len(upstream.requests) == 1  # a refusal of the request is not retried
    upstream.reset()
    with pytest.raises(openai.InternalServerError) as overloaded:
        client.chat.completions.create(model="overloaded", messages=HELLO, max_tokens=8)  # type: ignore[arg-type]
    assert overloaded.value.status_code == 502
    assert len(upstream.requests) == RETRY["attempts_per_endpoint"]  # 529 is retried


def test_a_messages_client_through_both_translations(gateway: GatewayServer, upstream: FakeAnthropicUpstream) -> None:
    with anthropic.Anthropic(base_url=gateway.root, api_key=GATEWAY_KEY, max_retries=0, timeout=10) as client:
        tool = {"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}
        with client.messages.stream(model="claude", max_tokens=64, messages=[{"role": "user", "content": "weather?"}], tools=[tool]) as stream:  # type: ignore[list-item]
            final = stream.get_final_message()
        [block] = [b for b in final.content if b.type == "tool_use"]
        assert block.input == EXPECTED_ARGS and final.stop_reason == "tool_use"
        assert final.usage.cache_read_input_tokens == 3
        text = client.messages.create(model="claude", max_tokens=64, messages=HELLO)  # type: ignore[arg-type]
        assert text.content[0].text == "You said: Say hello"  # type: ignore[union-attr]
        assert (text.usage.input_tokens, text.usage.cache_read_input_tokens) == (2 + 4 - 3, 3)


def test_count_tokens_is_the_anthropic_upstreams_own(gateway: GatewayServer, upstream: FakeAnthropicUpstream) -> None:
    request: dict[str, Any] = {
        "model": "claude",
        "system": "Be brief today.",
        "messages": [{"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hi"}, *HELLO],
    }
    with anthropic.Anthropic(base_url=gateway.root, api_key=GATEWAY_KEY, max_retries=0, timeout=10) as client:
        raw = client.messages.with_raw_response.count_tokens(**request)
        answer = client.messages.create(max_tokens=8, **request)
    assert raw.headers["x-gateway-token-count"] == "exact; counted by endpoint anth/claude"
    # What the upstream reports as the prompt of the same request, fresh and cached together.
    assert raw.parse().input_tokens == answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) > 0
    [counted] = [r for r in upstream.requests if r.path == "/v1/messages/count_tokens"]
    assert set(counted.body) == {"model", "messages", "system"}  # nothing the count route refuses
    assert counted.headers["x-api-key"] == ANTHROPIC_KEY
