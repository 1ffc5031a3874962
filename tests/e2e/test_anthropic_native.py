"""Messages pass-through: a `/v1/messages` client (the official `anthropic` SDK) in front of the fake
Anthropic upstream through deployments with ``native: [messages]`` (the client's body and the
upstream's answer and events as they are) and without (both translations), on the same gateway,
with fallback between the two kinds for one request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import Settings, load_config
from tests.e2e.conftest import GATEWAY_KEY, RETRY, TIMEOUTS
from tests.fakes.anthropic_upstream import THOUGHT, FakeAnthropicUpstream
from tests.fakes.openai_upstream import REPLY_PREFIX, FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

ANTHROPIC_KEY = "sk-ant-fake-upstream-0019"
ANTHROPIC_KEY_ENV = "FAKE_ANTHROPIC_NATIVE_KEY"
CAPS = {"logprobs": False, "native_n": False, "modes": ["chat"]}
NATIVE = ["messages"]
PER_ENDPOINT = RETRY["attempts_per_endpoint"]
BETA = "prompt-caching-2024-07-31"
EPHEMERAL = {"type": "ephemeral"}
# What the chat translation cannot carry: cache_control on blocks, thinking, a field it ignores.
RICH: dict[str, Any] = {
    "max_tokens": 2048,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello", "cache_control": EPHEMERAL}]}],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "service_tier": "auto",
}
HELLO = [{"role": "user", "content": "Say hello"}]
BUDGET_KEY = "sk-gw-native-budget-0019"
WEATHER = {
    "name": "get_weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
EXPECTED_INPUT = {"city": "city-value", "unit": "celsius", "days": 1}


def _anth(model: str, upstream: str, *, native: bool = True) -> dict[str, Any]:
    return {"model": model, "provider": "anth", "upstream_model": upstream, "capabilities": CAPS, "native": NATIVE if native else []}


def settings(anthropic_url: str, openai_url: str) -> Settings:
    return load_config(
        environ={ANTHROPIC_KEY_ENV: ANTHROPIC_KEY},
        auth={"keys": [{"name": "plain", "key": GATEWAY_KEY}, {"name": "budgeted", "key": BUDGET_KEY, "budget_usd": 1.0}]},
        timeouts=TIMEOUTS,
        retry=RETRY,
        breaker={"min_requests": 1000},
        providers=[
            {"name": "anth", "kind": "anthropic", "base_url": anthropic_url, "api_key_env": ANTHROPIC_KEY_ENV},
            {"name": "oai", "kind": "openai", "base_url": openai_url},
        ],
        deployments=[
            _anth("claude", "claude-fake"),
            _anth("claude-translated", "claude-fake", native=False),
            _anth("claude-usage", "claude-fake"),
            {**_anth("claude-priced", "claude-fake"), "price": {"input": 0.0, "output": 1000.0}},  # $0.001 an output token
            _anth("claude-cut", "c@cut:4"),
            _anth("claude-cut-late", "c@cut:10"),
            {**_anth("claude-small", "claude-fake"), "context_window": 8192},
            _anth("claude-overloaded-event", "c@error-event:4"),
            _anth("claude-429", "c@status:429;retry-after=0"),
            _anth("claude-529", "c@status:529;retry-after=0"),
            # Listed first, so tried first: a failing native endpoint, then a translating one.
            _anth("mixed", "c@status:500"),
            {"model": "mixed", "provider": "oai", "upstream_model": "b-ok"},
            _anth("mixed-stream", "c@status:500"),
            {"model": "mixed-stream", "provider": "oai", "upstream_model": "b-ok"},
            {"model": "reverse", "provider": "oai", "upstream_model": "a@status:500"},
            _anth("reverse", "claude-fake"),
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
def anth(anthropic_upstream: FakeAnthropicUpstream) -> FakeAnthropicUpstream:
    anthropic_upstream.reset()
    return anthropic_upstream


@pytest.fixture
def client(gateway: GatewayServer, anth: FakeAnthropicUpstream, upstream: FakeOpenAIUpstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway.root, api_key=GATEWAY_KEY, max_retries=0, timeout=10) as c:
        yield c


def test_native_sends_the_clients_body_as_is_and_returns_the_upstreams_message(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    raw = client.messages.with_raw_response.create(model="claude", extra_headers={"anthropic-beta": BETA}, **RICH)
    reply = raw.parse()
    [sent] = anth.requests
    assert sent.body == {"model": "claude-fake", **RICH}  # nothing dropped, nothing added but the model
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY and GATEWAY_KEY not in str(sent.headers)
    assert sent.headers["anthropic-version"] == "2023-06-01" and sent.headers["anthropic-beta"] == BETA
    assert raw.headers["x-gateway-endpoint"] == "anth/claude"
    thinking, text = reply.content
    assert thinking.type == "thinking" and thinking.thinking == THOUGHT and thinking.signature == "sig-fake-1"
    assert text.type == "text" and text.text == REPLY_PREFIX + "Say hello"
    assert reply.model == "claude-fake" and reply.id.startswith("msg_fake")  # the upstream's own Message
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens) == (2 + 2 + 4 - 3, 3)


def test_translated_the_same_request_loses_what_chat_cannot_carry(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    reply = client.messages.create(model="claude-translated", extra_headers={"anthropic-beta": BETA}, **RICH)
    [sent] = anth.requests
    assert "cache_control" not in str(sent.body) and "thinking" not in sent.body and "service_tier" not in sent.body
    assert sent.body["system"] == "Be brief." and "anthropic-beta" not in sent.headers
    assert [b.type for b in reply.content] == ["text"] and reply.model == "claude-translated"


def test_a_native_stream_reassembled_by_the_sdk_equals_the_whole_message(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    whole = client.messages.create(model="claude", **RICH)
    with client.messages.stream(model="claude", **RICH) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY_PREFIX + "Say hello"
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]  # thinking and its signature too
    assert final.stop_reason == whole.stop_reason == "end_turn"
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.cache_read_input_tokens == whole.usage.cache_read_input_tokens == 3
    assert anth.requests[-1].body == {"model": "claude-fake", "stream": True, **RICH}


def test_a_native_streamed_tool_use_reassembled_by_the_sdk_equals_the_whole_one(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {"model": "claude", "max_tokens": 64, "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
        final = stream.get_final_message()
    assert len(deltas) > 2  # the input arrived in pieces
    [expected] = [b for b in whole.content if b.type == "tool_use"]
    [block] = [b for b in final.content if b.type == "tool_use"]
    assert block.input == expected.input == EXPECTED_INPUT and block.name == expected.name == "get_weather"
    assert final.stop_reason == whole.stop_reason == "tool_use"


def _tokens(server: GatewayServer, endpoint: str, want_prompt: float) -> dict[str, float]:
    """The endpoint's token counters from /metrics, once the accounting (after the answer) has run."""
    deadline = time.monotonic() + 5
    while True:
        text = httpx.get(server.root + "/metrics").text
        found = {
            s.labels["kind"]: s.value
            for family in text_string_to_metric_families(text)
            if family.name == "gateway_tokens"
            for s in family.samples
            if s.name == "gateway_tokens_total" and s.labels.get("endpoint") == endpoint
        }
        if found.get("prompt", 0) >= want_prompt or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_usage_of_native_answers_and_streams_is_recorded(client: anthropic.Anthropic, gateway: GatewayServer) -> None:
    client.messages.create(model="claude-usage", max_tokens=64, messages=HELLO)  # type: ignore[arg-type]
    with client.messages.stream(model="claude-usage", max_tokens=64, messages=HELLO) as stream:  # type: ignore[arg-type]
        stream.get_final_message()
    prompt = 2 + 4  # the fake's count of "Say hello"; 3 of it read from cache
    assert _tokens(gateway, "anth/claude-usage", 2 * prompt) == {"prompt": 2 * prompt, "cached": 2 * 3, "completion": 2 * 4}


def test_upstream_429_and_529_are_the_sdks_typed_errors(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(model="claude-429", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(anth.requests) == PER_ENDPOINT  # retried before giving up, as when translating
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        with client.messages.stream(model="claude-529", max_tokens=8, messages=HELLO) as stream:  # type: ignore[arg-type]
            stream.get_final_message()
    assert overloaded.value.status_code == 502 and overloaded.value.body["type"] == "error"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
def test_fallback_from_a_native_endpoint_to_a_translating_one(
    client: anthropic.Anthropic, anth: FakeAnthropicUpstream, upstream: FakeOpenAIUpstream, stream: bool
) -> None:
    model = "mixed-stream" if stream else "mixed"
    request: dict[str, Any] = {"model": model, "max_tokens": 64, "system": RICH["system"], "messages": HELLO}
    if stream:
        with client.messages.with_streaming_response.create(stream=True, **request) as raw:
            endpoint = raw.headers["x-gateway-endpoint"]
            events = list(raw.parse())
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
        assert events[-1].type == "message_stop"
    else:
        raw = client.messages.with_raw_response.create(**request)
        endpoint = raw.headers["x-gateway-endpoint"]
        text = raw.parse().content[0].text  # type: ignore[union-attr]
    assert endpoint == f"oai/{model}" and text == REPLY_PREFIX + "Say hello"
    assert len(anth.requests) == PER_ENDPOINT and all(r.body["system"] == RICH["system"] for r in anth.requests)  # sent as is
    [chat] = upstream.requests_for("b-ok")
    assert chat.body["messages"][0] == {"role": "system", "content": "Be brief."}  # the translation


def test_fallback_from_a_translating_endpoint_to_a_native_one(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    raw = client.messages.with_raw_response.create(model="reverse", **RICH)
    assert raw.headers["x-gateway-endpoint"] == "anth/reverse"
    assert [b.type for b in raw.parse().content] == ["thinking", "text"]
    assert [r.body for r in anth.requests] == [{"model": "claude-fake", **RICH}]


DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "A short note."}, "title": "note"}
WITH_DOCUMENT: dict[str, Any] = {"max_tokens": 64, "messages": [{"role": "user", "content": [DOCUMENT, {"type": "text", "text": "Summarise"}]}]}


def test_what_chat_cannot_carry_goes_only_to_endpoints_that_take_it_as_is(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    reply = client.messages.create(model="claude", **WITH_DOCUMENT)
    assert reply.content[-1].text == REPLY_PREFIX + "Summarise"  # type: ignore[union-attr]
    assert anth.requests[-1].body["messages"] == WITH_DOCUMENT["messages"]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-translated", **WITH_DOCUMENT)
    assert "messages[0].content[0].type" in refused.value.message
    anth.reset()
    # Of a translating and a native deployment, the document goes to the native one, tried alone.
    raw = client.messages.with_raw_response.create(model="reverse", **WITH_DOCUMENT)
    assert raw.headers["x-gateway-endpoint"] == "anth/reverse" and raw.headers["x-gateway-attempts"] == "1"
    assert [r.body["messages"] for r in anth.requests] == [WITH_DOCUMENT["messages"]]


def test_a_budget_binds_native_requests_from_their_max_tokens(gateway: GatewayServer, anth: FakeAnthropicUpstream) -> None:
    with anthropic.Anthropic(base_url=gateway.root, api_key=BUDGET_KEY, max_retries=0, timeout=10) as budgeted:
        with pytest.raises(anthropic.RateLimitError):  # 2048 tokens at $0.001 could cost $2.05, over the $1.00 budget
            budgeted.messages.create(model="claude-priced", max_tokens=2048, messages=HELLO)  # type: ignore[arg-type]
        assert anth.requests == []
        reply = budgeted.messages.create(model="claude-priced", max_tokens=500, messages=HELLO)  # type: ignore[arg-type]
    assert reply.usage.output_tokens == 4 and len(anth.requests) == 1


@pytest.mark.parametrize("model", ["claude-cut", "claude-overloaded-event"])
def test_a_native_stream_cut_midway_raises_and_never_looks_finished(client: anthropic.Anthropic, model: str) -> None:
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:  # type: ignore[arg-type]
            for event in stream:
                seen.append(event.type)
    assert "message_start" in seen and "text" in seen
    assert "message_stop" not in seen and "message_delta" not in seen


def test_a_native_stream_cut_is_charged_for_the_output_relayed(client: anthropic.Anthropic, gateway: GatewayServer) -> None:
    # message_start's usage (output_tokens 1) is the prompt's only: the deltas relayed count until message_delta.
    texts: list[str] = []
    words = [{"role": "user", "content": "one two three four five six seven eight nine"}]
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model="claude-cut-late", max_tokens=64, messages=words) as stream:  # type: ignore[arg-type]
            texts.extend(event.text for event in stream if event.type == "text")
    assert len(texts) == 7  # events 3..9 of the fake: the deltas before the cut
    tokens = _tokens(gateway, "anth/claude-cut-late", 1)
    assert tokens["completion"] >= len(texts) and tokens["cached"] == 3  # the prompt: message_start's own count


def test_a_big_document_counts_in_full_for_routing(client: anthropic.Anthropic, anth: FakeAnthropicUpstream) -> None:
    # The chat view holds what it cannot translate as text of its size: the context filter sees it all.
    big = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "word " * 20_000}}
    request: dict[str, Any] = {"max_tokens": 64, "messages": [{"role": "user", "content": [big, {"type": "text", "text": "Summarise"}]}]}
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.messages.create(model="claude-small", **request)
    assert refused.value.status_code == 400 and "context" in refused.value.message and anth.requests == []
    small = {**request, "messages": [{"role": "user", "content": [DOCUMENT, {"type": "text", "text": "Summarise"}]}]}
    assert client.messages.create(model="claude-small", **small).content
