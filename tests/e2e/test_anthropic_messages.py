"""The Anthropic Messages API through the gateway, in front of the fake Chat Completions upstream,
with the official `anthropic` SDK as the client: answers, streams reassembled by the SDK's own
helpers, tool use round trips, count_tokens, and the typed errors the SDK raises."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.routing.tokens import TokenCounter
from gateway.translate.anthropic_request import to_chat
from tests.e2e.conftest import GATEWAY_KEY, RETRY, TIMEOUTS, not_ready_endpoint
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

HELLO = [{"role": "user", "content": "Say hello"}]
# Four properties: the fake streams the arguments 7 characters an event, so several input_json_delta.
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
            "hourly": {"type": "boolean"},
        },
        "required": ["city"],
    },
}
REASONING = "The user greets me, so I greet back."
DEEP: list[Any] = []
for _ in range(70):  # past server.max_json_depth (64)
    DEEP = [DEEP]
EXPECTED_INPUT = {"city": "city-value", "unit": "celsius", "days": 1, "hourly": True}


def client_for(server: GatewayServer, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("api_key", GATEWAY_KEY)
    return anthropic.Anthropic(base_url=server.root, max_retries=0, timeout=10, **kwargs)


@pytest.fixture(scope="module")
def stop_upstream(servers: BackgroundLoop) -> Iterator[FakeOpenAIUpstream]:
    """A fake that names the matched stop sequence as vLLM does (`stop_reason`), and reasons."""
    upstream = servers.call(FakeOpenAIUpstream(vllm_stop_reason=True, reasoning=REASONING).start())
    yield upstream
    servers.call(upstream.stop())


def messages_settings(upstream_url: str, vllm_url: str) -> Settings:
    base = {"upstream_model": "gpt-fake"}
    deployments: list[dict[str, Any]] = [
        {"model": "chat-model", "provider": "fake", **base},
        {"model": "vllm-model", "provider": "vllm", **base},
        {"model": "rejects", "provider": "fake", "upstream_model": "a@status:400"},
        {"model": "all-500", "provider": "fake", "upstream_model": "x@status:500"},
        {"model": "cut-stream", "provider": "fake", "upstream_model": "cut@cut:2"},
        {"model": "error-stream", "provider": "fake", "upstream_model": "err@error-event:2"},
        {"model": "early-end-stream", "provider": "fake", "upstream_model": "early@end-early:2"},
    ]
    return load_config(
        server={"max_body_bytes": 64 * 1024},
        auth={"keys": [{"name": "plain", "key": GATEWAY_KEY}]},
        timeouts=TIMEOUTS,
        retry=RETRY,
        breaker={"min_requests": 1000},
        providers=[
            {"name": "fake", "kind": "openai", "base_url": upstream_url},
            {"name": "vllm", "kind": "openai", "base_url": vllm_url},
        ],
        deployments=deployments,
    )


@pytest.fixture(scope="module")
def messages_gateway(
    servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream, stop_upstream: FakeOpenAIUpstream
) -> Iterator[GatewayServer]:
    app = create_app(messages_settings(upstream_server.url, stop_upstream.url), extra_endpoints=[not_ready_endpoint("unavailable")])
    server = GatewayServer(app, servers).start()
    yield server
    server.stop()


@pytest.fixture
def client(messages_gateway: GatewayServer, upstream: FakeOpenAIUpstream) -> Iterator[anthropic.Anthropic]:
    with client_for(messages_gateway) as c:
        yield c


def test_create_answers_with_text_stop_reason_and_usage(client: anthropic.Anthropic, upstream: FakeOpenAIUpstream) -> None:
    message = client.messages.create(
        model="chat-model",
        max_tokens=64,
        system="Be brief.",
        messages=HELLO,
        metadata={"user_id": "u-7"},
        extra_body={"temperature": 0.5, "top_k": 20},  # sampling is no longer in this SDK's signature
    )
    assert message.type == "message" and message.role == "assistant" and message.model == "chat-model"
    assert message.id.startswith("msg_")
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "You said: Say hello"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    sent = upstream.requests[-1].body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.5 and sent["top_k"] == 20 and sent["user"] == "u-7"
    # The fake counts words + 4 per message; Anthropic's input_tokens is that, none cached.
    assert message.usage.input_tokens == (2 + 4) + (2 + 4)
    assert message.usage.output_tokens == 4


def test_structured_output_reaches_the_upstream_as_json_schema(client: anthropic.Anthropic, upstream: FakeOpenAIUpstream) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    message = client.messages.create(
        model="chat-model", max_tokens=64, messages=HELLO, output_config={"format": {"type": "json_schema", "schema": schema}}
    )
    assert json.loads(message.content[0].text) == {"answer": "ok"}  # type: ignore[union-attr]
    assert upstream.requests[-1].body["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def test_reasoning_comes_back_as_thinking_when_asked_for(messages_gateway: GatewayServer) -> None:
    with client_for(messages_gateway) as client:
        plain = client.messages.create(model="vllm-model", max_tokens=64, messages=HELLO)
        assert [b.type for b in plain.content] == ["text"]  # not asked: dropped
        thinking: Any = {"type": "enabled", "budget_tokens": 1024}
        whole = client.messages.create(model="vllm-model", max_tokens=64, messages=HELLO, thinking=thinking)
        with client.messages.stream(model="vllm-model", max_tokens=64, messages=HELLO, thinking=thinking) as stream:
            final = stream.get_final_message()
    for message in (whole, final):
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].thinking == REASONING  # type: ignore[union-attr]
        assert message.content[1].text == "You said: Say hello"  # type: ignore[union-attr]


def test_max_tokens_and_stop_sequences_map_to_their_stop_reasons(messages_gateway: GatewayServer) -> None:
    with client_for(messages_gateway) as client:
        cut = client.messages.create(model="chat-model", max_tokens=2, messages=HELLO)
        assert cut.stop_reason == "max_tokens" and cut.content[0].text == "You said:"  # type: ignore[union-attr]
        stopped = client.messages.create(model="vllm-model", max_tokens=64, messages=HELLO, stop_sequences=["hello", "zzz"])
        assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "hello"
        assert stopped.content[0].text == "You said: Say "  # type: ignore[union-attr]
        with client.messages.stream(model="vllm-model", max_tokens=64, messages=HELLO, stop_sequences=["hello"]) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "stop_sequence" and final.stop_sequence == "hello"


def test_stream_text_equals_the_answer_and_carries_usage_at_both_ends(client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model="chat-model", max_tokens=64, messages=HELLO)
    with client.messages.stream(model="chat-model", max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text  # type: ignore[union-attr]
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (whole.usage.input_tokens, whole.usage.output_tokens)

    events = list(client.messages.create(model="chat-model", max_tokens=64, messages=HELLO, stream=True))
    assert events[0].type == "message_start"
    assert events[0].message.usage.input_tokens > 0  # the gateway's count, before the upstream's arrives
    assert [e.type for e in events[1:3]] == ["content_block_start", "content_block_delta"]
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.output_tokens == whole.usage.output_tokens
    assert delta.usage.input_tokens == whole.usage.input_tokens  # the upstream's own count, at the end
    assert events[-1].type == "message_stop"


def test_streamed_tool_use_in_pieces_is_reassembled_whole_by_the_sdk(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {
        "model": "chat-model",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    }
    whole = client.messages.create(**kwargs)
    pieces: list[str] = []
    with client.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                pieces.append(event.delta.partial_json)
        final = stream.get_final_message()
    assert len(pieces) >= 5  # the arguments came in several pieces
    assert json.loads("".join(pieces)) == EXPECTED_INPUT
    [block] = [b for b in final.content if b.type == "tool_use"]
    [expected] = [b for b in whole.content if b.type == "tool_use"]
    assert block.input == expected.input == EXPECTED_INPUT
    assert block.name == expected.name == "get_weather"
    assert block.id and expected.id
    assert final.stop_reason == whole.stop_reason == "tool_use"


def test_a_tool_result_round_trip_reaches_the_upstream_as_a_tool_message(
    client: anthropic.Anthropic, upstream: FakeOpenAIUpstream
) -> None:
    question = {"role": "user", "content": "weather in Paris?"}
    first = client.messages.create(model="chat-model", max_tokens=64, messages=[question], tools=[WEATHER])
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use"
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "18C and sunny"}
    second = client.messages.create(
        model="chat-model",
        max_tokens=64,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[question, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}],  # type: ignore[list-item]
    )
    sent = upstream.requests[-1].body["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["tool_calls"][0]["id"] == call.id
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == EXPECTED_INPUT
    assert sent[2] == {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"}
    assert upstream.requests[-1].body["tool_choice"] == "none"
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"


def test_count_tokens_counts_the_translated_prompt(client: anthropic.Anthropic, messages_gateway: GatewayServer) -> None:
    request: dict[str, Any] = {"model": "chat-model", "system": "Be brief.", "messages": HELLO, "tools": [WEATHER]}
    counted = client.messages.count_tokens(**request)
    chat = to_chat(request, counting=True).body
    assert counted.input_tokens == TokenCounter().count_chat(chat["messages"], chat["tools"]) > 0
    response = httpx.post(
        messages_gateway.root + "/v1/messages/count_tokens",
        json=request,
        headers={"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 200 and response.json() == {"input_tokens": counted.input_tokens}
    assert response.headers["x-gateway-token-count"].startswith("estimate")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=HELLO)  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.count_tokens(model="chat-model", messages=[{"role": "user", "content": [{"type": "text"}]}])  # type: ignore[list-item,typeddict-item]
    assert "messages[0].content[0].text" in bad.value.body["error"]["message"]  # type: ignore[index]
    with client_for(messages_gateway, api_key="sk-wrong-key-000000") as stranger, pytest.raises(anthropic.AuthenticationError):
        stranger.messages.count_tokens(model="chat-model", messages=HELLO)  # type: ignore[arg-type]


def test_bearer_auth_works_as_well_as_x_api_key(messages_gateway: GatewayServer) -> None:
    with client_for(messages_gateway, api_key=None, auth_token=GATEWAY_KEY) as client:
        assert client.messages.create(model="chat-model", max_tokens=8, messages=HELLO).stop_reason in ("end_turn", "max_tokens")


@pytest.mark.parametrize("kwargs", [{"api_key": "sk-wrong-key-000000"}, {"api_key": None, "auth_token": "sk-wrong"}])
def test_a_bad_key_is_an_authentication_error(messages_gateway: GatewayServer, kwargs: dict[str, Any]) -> None:
    with client_for(messages_gateway, **kwargs) as client, pytest.raises(anthropic.AuthenticationError) as caught:
        client.messages.create(model="chat-model", max_tokens=8, messages=HELLO)
    assert caught.value.status_code == 401
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


@pytest.mark.parametrize(
    ("x_api_key", "bearer", "status"),
    [
        ("sk-a-real-anthropic-key", GATEWAY_KEY, 200),  # Claude Code with both variables set
        (GATEWAY_KEY, "sk-something-else", 200),
        ("sk-wrong-1", "sk-wrong-2", 401),
        ("", "sk-wrong-2", 401),
    ],
)
def test_with_both_headers_either_may_hold_the_gateway_key(
    messages_gateway: GatewayServer, x_api_key: str, bearer: str, status: int
) -> None:
    headers = {"x-api-key": x_api_key, "authorization": f"Bearer {bearer}"}
    body = {"model": "chat-model", "max_tokens": 8, "messages": HELLO}
    response = httpx.post(messages_gateway.root + "/v1/messages", json=body, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["error"]["type"] == "authentication_error"


def test_no_key_is_an_authentication_error_that_names_x_api_key(messages_gateway: GatewayServer) -> None:
    response = httpx.post(messages_gateway.root + "/v1/messages", json={"model": "chat-model", "max_tokens": 8, "messages": HELLO})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in response.json()["error"]["message"]


def test_missing_max_tokens_is_a_bad_request_naming_it(client: anthropic.Anthropic, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="chat-model", max_tokens=8, messages=HELLO, extra_body={"max_tokens": None})
    assert caught.value.body["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required"}  # type: ignore[index]
    assert not upstream.requests


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"tools": [{"name": "f", "input_schema": "no"}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "extra": DEEP}]}]}, "messages[0].content[0]"),
    ],
)
def test_hostile_input_is_a_400_naming_the_field(
    client: anthropic.Anthropic, upstream: FakeOpenAIUpstream, extra: dict[str, Any], field: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="chat-model", max_tokens=8, messages=HELLO, extra_body=extra)
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert field in caught.value.body["error"]["message"]  # type: ignore[index]
    assert not upstream.requests


def test_not_json_is_a_400_in_anthropics_shape(messages_gateway: GatewayServer) -> None:
    response = httpx.post(
        messages_gateway.root + "/v1/messages", content=b"{nope", headers={"x-api-key": GATEWAY_KEY, "content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"


def test_typed_errors_for_unknown_models_and_upstream_failures(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=8, messages=HELLO)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="rejects", max_tokens=8, messages=HELLO)  # the upstream refused the request
    with pytest.raises(anthropic.InternalServerError) as failed:
        client.messages.create(model="all-500", max_tokens=8, messages=HELLO)
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as unavailable:
        client.messages.create(model="unavailable", max_tokens=8, messages=HELLO)
    assert unavailable.value.status_code == 503 and unavailable.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@pytest.mark.parametrize("model", ["cut-stream", "error-stream", "early-end-stream"])
def test_a_stream_cut_midway_raises_and_never_looks_finished(client: anthropic.Anthropic, model: str) -> None:
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:
            for event in stream:
                seen.append(event.type)
    assert "message_start" in seen and "text" in seen
    assert "message_stop" not in seen and "message_delta" not in seen
    assert caught.value.body["type"] == "error"  # type: ignore[index]


def test_the_wire_format_has_event_names_and_a_ping(messages_gateway: GatewayServer) -> None:
    response = httpx.post(
        messages_gateway.root + "/v1/messages",
        json={"model": "chat-model", "max_tokens": 16, "messages": HELLO, "stream": True},
        headers={"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "x-2025-01-01"},
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    names = [block.split("\n")[0].removeprefix("event: ") for block in response.text.split("\n\n") if block]
    assert names[:2] == ["message_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "[DONE]" not in response.text
