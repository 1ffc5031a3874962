"""Responses pass-through: a `/v1/responses` client (the official `openai` SDK) in front of the fake
OpenAI upstream's own /v1/responses through deployments with ``native: [responses]`` (the client's
body, the gateway's state expanded into it, and the upstream's answer and events, the gateway's id,
model and store put in) and without (the translation to chat), with fallback between the two."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.state_store.memory import MemoryStore
from tests.e2e.conftest import GATEWAY_KEY, RETRY, TIMEOUTS, sync_client
from tests.e2e.test_anthropic_native import _tokens
from tests.fakes.openai_upstream import REPLY_PREFIX, FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

NATIVE = ["responses"]
PER_ENDPOINT = RETRY["attempts_per_endpoint"]
UPSTREAM = "gpt-native"
# What the chat translation drops or changes: reasoning's summary, include, text.verbosity, fields it
# does not know (sent to chat as they are, but not as Responses fields).
RICH: dict[str, Any] = {
    "input": "Say hello",
    "instructions": "Be brief.",
    "reasoning": {"effort": "low", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "text": {"format": {"type": "text"}, "verbosity": "low"},
    "metadata": {"run": "19"},
}
EXTRA = {"safety_identifier": "user-19", "prompt_cache_key": "k-19"}
HOSTED = [{"type": "web_search"}]


def _dep(model: str, upstream: str, *, native: bool = True) -> dict[str, Any]:
    return {"model": model, "provider": "fake", "upstream_model": upstream, "native": NATIVE if native else []}


def settings(url: str, **overrides: Any) -> Settings:
    return load_config(
        **overrides,
        environ={},
        auth={"keys": [{"name": "plain", "key": GATEWAY_KEY}]},
        timeouts=TIMEOUTS,
        retry=RETRY,
        breaker={"min_requests": 1000},
        providers=[{"name": "fake", "kind": "openai", "base_url": url}],
        deployments=[
            _dep("native", UPSTREAM),
            _dep("translated", UPSTREAM, native=False),
            _dep("native-usage", "gpt-usage"),
            _dep("native-429", "n@status:429;retry-after=0"),
            _dep("native-cut", "n@cut:5"),
            _dep("native-cut-late", "n@cut:12"),
            _dep("native-error-event", "n@error-event:5"),
            # Listed first, so tried first: a failing native endpoint, then a translating one.
            {**_dep("mixed", "n@status:500"), "id": "mixed-native"},
            {**_dep("mixed", "gpt-fallback", native=False), "id": "mixed-chat"},
        ],
    )


@pytest.fixture(scope="module")
def gateway(servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream) -> Iterator[GatewayServer]:
    server = GatewayServer(create_app(settings(upstream_server.url)), servers).start()
    yield server
    server.stop()


@pytest.fixture
def client(gateway: GatewayServer, upstream: FakeOpenAIUpstream) -> Iterator[openai.OpenAI]:
    with sync_client(gateway) as c:
        yield c


def _native_sent(upstream: FakeOpenAIUpstream) -> list[dict[str, Any]]:
    return [r.body for r in upstream.requests if r.path == "/v1/responses"]


def _plain(response: Any) -> dict[str, Any]:
    """The response as sent, less what the SDK's stream helper adds to its final one (`parsed`)."""
    out = response.to_dict()
    for item in out["output"]:
        for part in item.get("content") or ():
            part.pop("parsed", None)
    return out  # type: ignore[no-any-return]


def _shape(response: Any) -> dict[str, Any]:
    """A response less what differs between two answers to one request (ids, times)."""
    out = _plain(response)
    for name in ("id", "created_at"):
        out.pop(name)
    for item in out["output"]:
        item.pop("id")
    return out


def test_native_sends_the_clients_body_with_only_the_gateways_part_changed(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    raw = client.responses.with_raw_response.create(model="native", extra_body=EXTRA, **RICH)
    reply = raw.parse()
    [sent] = upstream.requests
    assert sent.path == "/v1/responses"
    assert sent.body == {
        **RICH,
        **EXTRA,
        "model": UPSTREAM,
        "store": False,
    }  # nothing dropped: the upstream keeps nothing
    assert GATEWAY_KEY not in str(sent.headers)
    assert raw.headers["x-gateway-endpoint"] == "fake/native"
    assert reply.output_text == REPLY_PREFIX + "Say hello"
    assert reply.reasoning is not None and reply.reasoning.summary == "auto" and reply.text.verbosity == "low"  # type: ignore[union-attr]
    # The gateway's: its id (the upstream's was resp_fake...), the public model, store as asked.
    assert reply.id.startswith("resp_") and "fake" not in reply.id
    assert reply.model == "native" and reply.store is True and reply.previous_response_id is None
    assert reply.usage is not None and reply.usage.output_tokens == len((REPLY_PREFIX + "Say hello").split())


def test_translated_the_same_request_loses_what_chat_cannot_carry(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    reply = client.responses.create(model="translated", extra_body=EXTRA, **RICH)
    [sent] = upstream.requests
    assert sent.path == "/v1/chat/completions"
    assert "verbosity" not in str(sent.body) and "include" not in sent.body and sent.body["reasoning_effort"] == "low"
    assert "summary" not in str(sent.body) and reply.output_text == REPLY_PREFIX + "Say hello"


def test_hosted_tools_go_only_to_endpoints_that_take_responses_as_is(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    reply = client.responses.create(model="native", input="Say hello", tools=HOSTED)  # type: ignore[arg-type]
    assert reply.output_text == REPLY_PREFIX + "Say hello"
    assert _native_sent(upstream)[-1]["tools"] == HOSTED
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="translated", input="Say hello", tools=HOSTED)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "tools[0].type"  # type: ignore[index]


def test_a_previous_response_id_chain_is_the_gateways_expanded_into_input(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    first = client.responses.create(model="native", input="remember 42")
    assert client.responses.retrieve(first.id).to_dict() == first.to_dict()
    second = client.responses.create(model="native", input="what number?", previous_response_id=first.id)
    sent = _native_sent(upstream)[-1]
    assert "previous_response_id" not in sent and sent["store"] is False
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "remember 42"},
        first.output[0].to_dict(),  # the upstream's own output item, as it gave it
        {"type": "message", "role": "user", "content": "what number?"},
    ]
    assert second.previous_response_id == first.id and second.output_text == REPLY_PREFIX + "what number?"
    items = client.responses.input_items.list(second.id, order="asc")
    assert [i.content[0].text for i in items.data] == ["what number?"]  # type: ignore[union-attr]
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="native", input="again?", previous_response_id=first.id)


def test_a_chain_crosses_translating_and_native_endpoints(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    first = client.responses.create(model="translated", input="remember 42")
    second = client.responses.create(model="native", input="what number?", previous_response_id=first.id)
    assert _native_sent(upstream)[-1]["input"] == [
        {"type": "message", "role": "user", "content": "remember 42"},
        {"type": "message", "role": "assistant", "content": REPLY_PREFIX + "remember 42"},  # rebuilt from the chat view
        {"type": "message", "role": "user", "content": "what number?"},
    ]
    client.responses.create(model="translated", input="and now?", previous_response_id=second.id)
    chat = [r.body for r in upstream.requests if r.path == "/v1/chat/completions"][-1]
    assert [m["content"] for m in chat["messages"]] == [
        "remember 42",
        REPLY_PREFIX + "remember 42",
        "what number?",
        REPLY_PREFIX + "what number?",
        "and now?",
    ]


def test_store_false_is_answered_and_not_kept(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    reply = client.responses.create(model="native", input="Say hello", store=False)
    assert reply.store is False and _native_sent(upstream)[-1]["store"] is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)


def test_a_native_stream_reassembled_by_the_sdk_equals_the_whole_response(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    whole = client.responses.create(model="native", **RICH)
    with client.responses.stream(model="native", **RICH) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert _native_sent(upstream)[-1] == {**RICH, "model": UPSTREAM, "store": False, "stream": True}
    assert _shape(final) == _shape(whole)
    assert [e.sequence_number for e in events] == list(range(len(events)))  # the upstream's, as they came
    carrying = [e for e in events if e.type in ("response.created", "response.in_progress", "response.completed")]
    assert len(carrying) == 3 and all(e.response.id == final.id and e.response.model == "native" for e in carrying)  # type: ignore[union-attr]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text  # type: ignore[union-attr]
    assert _plain(client.responses.retrieve(final.id)) == _plain(final)  # stored as the client saw it


def test_usage_of_native_answers_and_streams_is_recorded(client: openai.OpenAI, gateway: GatewayServer) -> None:
    client.responses.create(model="native-usage", input="Say hello")
    with client.responses.stream(model="native-usage", input="Say hello") as stream:
        stream.get_final_response()
    prompt = 2 + 4  # the fake's count of "Say hello"
    assert _tokens(gateway, "fake/native-usage", 2 * prompt) == {"prompt": 2 * prompt, "cached": 0, "completion": 2 * 4}


def test_an_upstream_429_is_the_sdks_rate_limit_error(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(openai.RateLimitError) as limited:
        client.responses.create(model="native-429", input="Say hello")
    assert limited.value.body["type"] == "rate_limit_error"  # type: ignore[index]
    assert len(_native_sent(upstream)) == PER_ENDPOINT  # retried before giving up, as when translating


@pytest.mark.parametrize("stream", [False, True])
def test_fallback_from_a_native_endpoint_to_a_translating_one(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream, stream: bool
) -> None:
    if stream:
        with client.responses.with_streaming_response.create(model="mixed", input="Say hello", stream=True) as raw:
            endpoint = raw.headers["x-gateway-endpoint"]
            events = list(raw.parse())
        assert events[-1].type == "response.completed"
        reply = events[-1].response  # type: ignore[union-attr]
    else:
        raw = client.responses.with_raw_response.create(model="mixed", input="Say hello")
        endpoint = raw.headers["x-gateway-endpoint"]
        reply = raw.parse()
    assert endpoint == "mixed-chat" and reply.output_text == REPLY_PREFIX + "Say hello"
    assert len(_native_sent(upstream)) == PER_ENDPOINT
    [chat] = upstream.requests_for("gpt-fallback")
    assert chat.path == "/v1/chat/completions" and chat.body["messages"] == [{"role": "user", "content": "Say hello"}]
    assert client.responses.retrieve(reply.id).output_text == reply.output_text


@pytest.mark.parametrize("model", ["native-cut", "native-error-event"])
def test_a_native_stream_cut_midway_raises_and_is_not_stored(client: openai.OpenAI, model: str) -> None:
    seen: list[Any] = []
    with pytest.raises(openai.APIError):
        with client.responses.stream(model=model, input="Say hello to everyone here") as stream:
            for event in stream:
                seen.append(event)
    types = [e.type for e in seen]
    assert "response.created" in types and "response.output_text.delta" in types and "response.completed" not in types
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(seen[0].response.id)


def test_a_native_stream_cut_is_charged_for_the_output_relayed(client: openai.OpenAI, gateway: GatewayServer) -> None:
    # Usage comes only in the terminal event: until then the deltas relayed are counted for an estimate.
    deltas: list[str] = []
    with pytest.raises(openai.APIError):
        with client.responses.stream(
            model="native-cut-late", input="one two three four five six seven eight nine ten"
        ) as stream:
            deltas.extend(e.delta for e in stream if e.type == "response.output_text.delta")
    assert len(deltas) >= 3
    assert _tokens(gateway, "fake/native-cut-late", 1)["completion"] >= len(deltas)


def test_a_native_chain_across_two_replicas(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream
) -> None:
    shared = MemoryStore()
    a, b = start_gateway(settings(upstream.url), store=shared), start_gateway(settings(upstream.url), store=shared)
    with sync_client(a) as ca, sync_client(b) as cb:
        with ca.responses.stream(model="native", input="remember 42") as stream:
            first = stream.get_final_response()
        assert _plain(cb.responses.retrieve(first.id)) == _plain(first)
        cb.responses.create(model="native", input="what number?", previous_response_id=first.id)
    assert [i.get("content") for i in _native_sent(upstream)[-1]["input"][::2]] == ["remember 42", "what number?"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_native_response_over_the_stores_cap_is_answered_and_not_kept(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, stream: bool
) -> None:
    small = start_gateway(settings(upstream.url, responses={"max_stored_bytes": 2048}))
    with sync_client(small) as c:
        kept = c.responses.create(model="native", input="short")
        assert c.responses.retrieve(kept.id).store is True
        if stream:
            with c.responses.stream(model="native", input="long " * 300) as s:
                events = list(s)
                big = s.get_final_response()
            assert events[0].response.store is True  # type: ignore[union-attr]  # echoed before the size was known
        else:
            big = c.responses.create(model="native", input="long " * 300)
        assert big.store is False and big.output_text.startswith(REPLY_PREFIX + "long")
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(big.id)


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
    },
    "required": ["city"],
}
TOOLS: list[Any] = [{"type": "function", "name": "get_weather", "parameters": WEATHER}, *HOSTED]


def test_a_native_streamed_call_equals_the_whole_one_and_its_output_goes_on(
    client: openai.OpenAI, upstream: FakeOpenAIUpstream
) -> None:
    kwargs: dict[str, Any] = {
        "model": "native",
        "input": "Weather in Paris?",
        "tools": TOOLS,
        "tool_choice": "required",
    }
    whole = client.responses.create(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        deltas = [e for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 2  # the arguments arrived in pieces
    [call] = [i for i in final.output if i.type == "function_call"]
    [expected] = [i for i in whole.output if i.type == "function_call"]
    assert (
        (call.name, call.arguments)
        == (expected.name, expected.arguments)
        == ("get_weather", '{"city": "city-value", "unit": "celsius", "days": 1}')
    )
    answer = client.responses.create(
        model="native",
        previous_response_id=final.id,
        tools=TOOLS,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert answer.output_text == REPLY_PREFIX + "sunny"
    sent = _native_sent(upstream)[-1]
    assert sent["tools"] == TOOLS and sent["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {k: v for k, v in call.to_dict().items() if k != "parsed_arguments"},  # the SDK helper's own
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]
