"""The OpenAI Responses API through the gateway, with the official `openai` SDK as the client, in
front of Chat Completions upstreams: `FakeOpenAIUpstream` (echoes, logprobs, faults) and
`ScriptedChat` (scripted text and tool calls: arguments in several deltas, parallel calls
interleaved)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.state_store.memory import MemoryStore
from tests.e2e.conftest import GATEWAY_KEY, RETRY, TIMEOUTS, async_client, sync_client
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.scripted_chat import Reply, ScriptedChat
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.state_store.redis_helpers import REDIS_URL, delete_prefix, free_port, redis_available, unique_prefix
from tests.services import require

OTHER_KEY = "sk-gw-other-key-0005"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
    {"type": "function", "name": "get_time", "parameters": WEATHER},
]


def settings_for(fake_url: str, scripted_url: str, **overrides: Any) -> Settings:
    config: dict[str, Any] = {
        "auth": {"keys": [{"name": "plain", "key": GATEWAY_KEY}, {"name": "other", "key": OTHER_KEY}]},
        "timeouts": TIMEOUTS,
        "retry": RETRY,
        "breaker": {"min_requests": 1000},
        "providers": [
            {"name": "fake", "kind": "openai", "base_url": fake_url},
            {"name": "scripted", "kind": "openai", "base_url": scripted_url},
        ],
        "deployments": [
            {"model": "chat-model", "provider": "fake", "upstream_model": "gpt-fake"},
            {"model": "cut-stream", "provider": "fake", "upstream_model": "cut@cut:3"},
            {"model": "all-500", "provider": "fake", "upstream_model": "x@status:500"},
            {"model": "scripted", "provider": "scripted", "upstream_model": "script"},
        ],
    }
    config.update(overrides)
    return load_config(environ={}, **config)


@pytest.fixture(scope="module")
def scripted_server(servers: BackgroundLoop) -> Iterator[ScriptedChat]:
    fake = servers.call(ScriptedChat().start())
    yield fake
    servers.call(fake.stop())


@pytest.fixture
def scripted(scripted_server: ScriptedChat) -> ScriptedChat:
    scripted_server.reset()
    return scripted_server


@pytest.fixture(scope="module")
def gw(servers: BackgroundLoop, upstream_server: FakeOpenAIUpstream, scripted_server: ScriptedChat) -> Iterator[GatewayServer]:
    server = GatewayServer(create_app(settings_for(upstream_server.url, scripted_server.url)), servers).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(gw: GatewayServer) -> Iterator[openai.OpenAI]:
    with sync_client(gw) as c:
        yield c


@pytest.fixture(scope="module")
def other(gw: GatewayServer) -> Iterator[openai.OpenAI]:
    with sync_client(gw, OTHER_KEY) as c:
        yield c


# -- text -------------------------------------------------------------------------------


def test_text_input_with_instructions(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    resp = client.responses.create(model="chat-model", input="hello there", instructions="Be brief.")
    assert resp.id.startswith("resp_") and resp.object == "response" and resp.status == "completed"
    assert resp.output_text == "You said: hello there"
    assert resp.model == "chat-model" and resp.instructions == "Be brief."
    assert resp.usage is not None and resp.usage.input_tokens > 0 and resp.usage.output_tokens == 4
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    sent = upstream.requests_for("gpt-fake")[-1].body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
    assert not {"input", "instructions", "store", "text"} & sent.keys()


def test_message_array_roles_and_parts(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    resp = client.responses.create(
        model="chat-model",
        input=[
            {"role": "developer", "content": "dev rules"},
            {"role": "user", "content": "first"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "second"}, {"type": "input_text", "text": "part"}]},
        ],
        temperature=0.3,
        top_p=0.9,
        max_output_tokens=50,
    )
    assert resp.output_text == "You said: second part"
    assert resp.temperature == 0.3 and resp.top_p == 0.9 and resp.max_output_tokens == 50
    sent = upstream.requests_for("gpt-fake")[-1].body
    assert sent["messages"] == [
        {"role": "system", "content": "dev rules"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]},
    ]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.3, 0.9, 50)


def test_max_output_tokens_cut_is_incomplete(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="chat-model", input="one two three four five", max_output_tokens=2)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == "You said:"


def test_json_schema_format(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    resp = client.responses.create(
        model="chat-model",
        input="answer in json",
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
    )
    assert json.loads(resp.output_text) == {"answer": "ok"}
    assert resp.text is not None and resp.text.format is not None and resp.text.format.type == "json_schema"
    sent = upstream.requests_for("gpt-fake")[-1].body
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


class Answer(BaseModel):
    answer: str


def test_sdk_parse_with_a_pydantic_text_format(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    parsed = client.responses.parse(model="chat-model", input="answer in json", text_format=Answer)
    assert parsed.output_parsed == Answer(answer="ok")
    fmt = upstream.requests_for("gpt-fake")[-1].body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Answer" and fmt["json_schema"]["strict"] is True


def test_include_logprobs(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    resp = client.responses.create(
        model="chat-model", input="hi", include=["message.output_text.logprobs"], top_logprobs=2
    )
    part = resp.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.logprobs is not None
    assert "".join(lp.token for lp in part.logprobs) == part.text == "You said: hi"
    assert all(len(lp.top_logprobs) == 2 and lp.logprob < 0 for lp in part.logprobs)
    sent = upstream.requests_for("gpt-fake")[-1].body
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2


# -- stored responses ------------------------------------------------------------------------


def test_retrieve_is_the_same_response_and_delete_removes_it(client: openai.OpenAI) -> None:
    created = client.responses.create(model="chat-model", input="keep me", metadata={"case": "a"})
    again = client.responses.retrieve(created.id)
    assert again.to_dict() == created.to_dict()
    items = client.responses.input_items.list(created.id)
    assert [(i.type, i.role, i.content[0].text) for i in items.data] == [("message", "user", "keep me")]  # type: ignore[union-attr]
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_input_items_pages_in_both_orders(client: openai.OpenAI) -> None:
    created = client.responses.create(
        model="chat-model", input=[{"role": "user", "content": f"m{i}"} for i in range(5)]
    )
    texts = lambda page: [i.content[0].text for i in page]  # type: ignore[union-attr]  # noqa: E731
    assert texts(client.responses.input_items.list(created.id, order="asc")) == ["m0", "m1", "m2", "m3", "m4"]
    first = client.responses.input_items.list(created.id, limit=2)
    assert texts(first.data) == ["m4", "m3"] and first.has_more
    assert texts(list(client.responses.input_items.list(created.id, limit=2))) == ["m4", "m3", "m2", "m1", "m0"]


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="chat-model", input="forget me", store=False)
    assert resp.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="chat-model", input="more", previous_response_id=resp.id)


def test_previous_response_id_carries_the_conversation(client: openai.OpenAI, upstream: FakeOpenAIUpstream) -> None:
    first = client.responses.create(model="chat-model", input="my name is Ada", instructions="first rules")
    second = client.responses.create(model="chat-model", input="what is it?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    sent = upstream.requests_for("gpt-fake")[-1].body
    # Instructions are not carried over (as at OpenAI); the turns are.
    assert sent["messages"] == [
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "You said: my name is Ada"},
        {"role": "user", "content": "what is it?"},
    ]
    third = client.responses.create(model="chat-model", input="and again", previous_response_id=second.id)
    assert len(upstream.requests_for("gpt-fake")[-1].body["messages"]) == 5
    assert third.output_text == "You said: and again"


def test_unknown_ids_are_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="chat-model", input="x", previous_response_id="resp_doesnotexist")
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]
    for call in (client.responses.retrieve, client.responses.delete, client.responses.input_items.list):
        with pytest.raises(openai.NotFoundError):
            call("resp_doesnotexist")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("../../etc/passwd")


def test_another_key_cannot_see_the_response(client: openai.OpenAI, other: openai.OpenAI) -> None:
    mine = client.responses.create(model="chat-model", input="secret")
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model="chat-model", input="leak?", previous_response_id=mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(mine.id)
    assert client.responses.retrieve(mine.id).id == mine.id  # untouched by the other key's delete


def test_cancel_is_only_for_background_responses(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="chat-model", input="x")
    with pytest.raises(openai.BadRequestError, match="background"):
        client.responses.cancel(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")


# -- tools ------------------------------------------------------------------------------


def test_function_call_round_trip(client: openai.OpenAI, scripted: ScriptedChat) -> None:
    scripted.script(Reply(calls=(("get_weather", '{"city": "Paris"}'),)), Reply(text="It is sunny in Paris."))
    first = client.responses.create(model="scripted", input="Weather in Paris?", tools=TOOLS, tool_choice="auto")
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id == "call_0001_0"  # the upstream's id
    second = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}],
        tools=TOOLS,
    )
    assert second.output_text == "It is sunny in Paris."
    sent = scripted.requests[-1]
    assert sent["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.call_id, "type": "function", "function": {"name": "get_weather", "arguments": call.arguments}}],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"sky": "sunny"}'},
    ]
    assert sent["tools"][0] == {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
    }
    items = client.responses.input_items.list(second.id)
    assert [(i.type, i.call_id) for i in items.data] == [("function_call_output", call.call_id)]  # type: ignore[union-attr]


def test_tool_choice_and_stateless_tool_loop(client: openai.OpenAI, scripted: ScriptedChat) -> None:
    """The whole history sent back by the client (store false), function calls included."""
    scripted.script(Reply(text="done"))
    client.responses.create(
        model="scripted",
        store=False,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_time"},
        parallel_tool_calls=False,
        input=[
            {"role": "user", "content": "time and weather?"},
            {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "noon"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        ],
    )
    sent = scripted.requests[-1]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert sent["parallel_tool_calls"] is False
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent["messages"][1]["tool_calls"]] == ["c1", "c2"]
    assert sent["messages"][3]["content"] == "rain"


PARALLEL = Reply(
    text=None,
    calls=(("get_weather", '{"city": "Paris, France", "unit": "celsius"}'), ("get_time", '{"city": "Tokyo, Japan"}')),
)


def test_streamed_parallel_tool_calls_equal_the_non_streamed_ones(client: openai.OpenAI, scripted: ScriptedChat) -> None:
    scripted.script(PARALLEL, PARALLEL)
    plain = client.responses.create(model="scripted", input="both", tools=TOOLS)
    with client.responses.stream(model="scripted", input="both", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    want = [(o.name, "", o.arguments) for o in plain.output]  # type: ignore[union-attr]
    assert [(o.name, "", o.arguments) for o in final.output] == want  # type: ignore[union-attr]
    assert len(want) == 2 and json.loads(want[0][2])["city"] == "Paris, France"
    # Each call keeps the id its upstream gave it, streamed or not.
    assert [o.call_id for o in plain.output] == ["call_0001_0", "call_0001_1"]  # type: ignore[union-attr]
    assert [o.call_id for o in final.output] == ["call_0002_0", "call_0002_1"]  # type: ignore[union-attr]
    deltas: dict[int, list[str]] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            deltas.setdefault(e.output_index, []).append(e.delta)
    assert len(deltas[0]) > 3 and len(deltas[1]) > 3  # really several deltas each, interleaved upstream
    assert ["".join(deltas[0]), "".join(deltas[1])] == [w[2] for w in want]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [(w[0], w[2]) for w in want]  # type: ignore[attr-defined]
    assert final.usage is not None and final.usage.input_tokens == 11 and final.usage.output_tokens == 7
    assert final.usage.input_tokens_details.cached_tokens == 3


# -- streaming --------------------------------------------------------------------------


def test_stream_event_sequence(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="chat-model", input="stream this please", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(kinds[4:-4]) == 5
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    completed = events[-1].response  # type: ignore[union-attr]
    assert text == "You said: stream this please" == completed.output_text
    assert events[0].response.status == "in_progress" and completed.status == "completed"  # type: ignore[union-attr]
    assert completed.usage is not None and completed.usage.output_tokens == 5
    item_id = events[2].item.id  # type: ignore[union-attr]
    assert {e.item_id for e in events if hasattr(e, "item_id")} == {item_id}
    # Stored before the client saw it completed: the same response on retrieve.
    assert client.responses.retrieve(completed.id).to_dict() == completed.to_dict()


async def test_async_stream_helper_with_logprobs(gw: GatewayServer) -> None:
    async with async_client(gw) as aclient:
        async with aclient.responses.stream(
            model="chat-model", input="tell me", include=["message.output_text.logprobs"]
        ) as stream:
            texts = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert "".join(texts) == final.output_text == "You said: tell me"
    logprobs = final.output[0].content[0].logprobs  # type: ignore[union-attr]
    assert logprobs is not None and "".join(lp.token for lp in logprobs) == final.output_text


def test_cut_stream_raises_and_is_not_stored(client: openai.OpenAI) -> None:
    seen: list[Any] = []
    with pytest.raises(openai.APIError):
        for event in client.responses.create(model="cut-stream", input="a b c d e f", stream=True):
            seen.append(event)
    assert seen and not any(e.type in ("response.completed", "response.incomplete") for e in seen)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(seen[0].response.id)


# -- errors -----------------------------------------------------------------------------


HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": ["just a string"]}, "input[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": True}, "top_p"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": "10"}, "max_output_tokens"),
    ({"include": ["everything"]}, "include[0]"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ({"store": "yes"}, "store"),
    ({"previous_response_id": 7}, "previous_response_id"),
    ({"background": True}, "background"),
    ({"metadata": {"k": 1}}, "metadata.k"),
    ({"model": ""}, "model"),
]


@pytest.mark.parametrize(("fields", "param"), HOSTILE, ids=[p for _, p in HOSTILE])
def test_bad_input_is_400_naming_the_param(client: openai.OpenAI, fields: dict[str, Any], param: str) -> None:
    body = {"model": "chat-model", "input": "hi", **fields}
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(**body)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param, err.value.body  # type: ignore[index]


def deep(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"x": node}}
    return node


def test_a_body_nested_too_deep_is_400_naming_the_responses_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="chat-model", input="x", tools=[{"type": "function", "name": "f", "parameters": deep(40)}])
    assert err.value.body["param"] == "tools[0].parameters.properties"  # type: ignore[index]
    assert "nested deeper than the limit of 64 levels" in err.value.message


def test_raw_http_errors(gw: GatewayServer) -> None:
    url = gw.url + "/responses"
    auth = {"authorization": f"Bearer {GATEWAY_KEY}"}
    assert httpx.post(url, content=b"{not json", headers=auth).status_code == 400
    assert httpx.post(url, json={"input": "x"}, headers=auth).json()["error"]["param"] == "model"
    r = httpx.post(url, json={"model": "chat-model", "input": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.post(url, json={"model": "no-such-model", "input": "x"}, headers=auth)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_sdk_typed_errors(gw: GatewayServer, client: openai.OpenAI) -> None:
    with sync_client(gw, "sk-wrong-key-0000000") as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.responses.create(model="chat-model", input="x")
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="all-500", input="x")


# -- replicas ---------------------------------------------------------------------------


def _chain_across(a: GatewayServer, b: GatewayServer, upstream: FakeOpenAIUpstream) -> None:
    with sync_client(a) as ca, sync_client(b) as cb:
        first = ca.responses.create(model="chat-model", input="remember 42")
        assert cb.responses.retrieve(first.id).to_dict() == first.to_dict()
        cb.responses.create(model="chat-model", input="what number?", previous_response_id=first.id)
        assert [m["content"] for m in upstream.requests_for("gpt-fake")[-1].body["messages"]] == [
            "remember 42",
            "You said: remember 42",
            "what number?",
        ]
        cb.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            ca.responses.retrieve(first.id)


def test_two_replicas_share_one_store(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, scripted_server: ScriptedChat
) -> None:
    shared = MemoryStore()
    settings = settings_for(upstream.url, scripted_server.url)
    _chain_across(start_gateway(settings, store=shared), start_gateway(settings, store=shared), upstream)


def test_two_replicas_over_redis(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, scripted_server: ScriptedChat
) -> None:
    require(redis_available(), f"Redis is not answering at {REDIS_URL}")
    prefix = unique_prefix()
    try:
        settings = settings_for(
            upstream.url, scripted_server.url, state_store={"backend": "redis", "url": REDIS_URL, "key_prefix": prefix}
        )
        _chain_across(start_gateway(settings), start_gateway(settings), upstream)
    finally:
        delete_prefix(prefix)


def test_store_outage(start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, scripted_server: ScriptedChat) -> None:
    """A state store that does not answer: continuing a conversation is a retryable 503 (never a 404
    that says the id does not exist); a new response is still answered, just not retrievable."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = settings_for(upstream.url, scripted_server.url, state_store={"backend": "redis", "url": dead, "timeout_s": 0.05})
    with sync_client(start_gateway(settings)) as c:
        with pytest.raises(openai.InternalServerError) as err:
            c.responses.create(model="chat-model", input="x", previous_response_id="resp_abc")
        assert err.value.status_code == 503 and err.value.body["code"] == "response_store_unavailable"  # type: ignore[index]
        assert err.value.response.headers["retry-after"] == "1"
        assert c.responses.create(model="chat-model", input="still answered").output_text == "You said: still answered"
        with pytest.raises(openai.InternalServerError):
            c.responses.retrieve("resp_abc")


# -- the Node SDK ---------------------------------------------------------------------------

NODE_DIR = Path(__file__).resolve().parent / "node"


@pytest.fixture(scope="module")
def node_outcomes(gw: GatewayServer, scripted_server: ScriptedChat) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "Node.js is missing: scripts/test.sh installs it"
    assert (NODE_DIR / "node_modules" / "openai").is_dir(), "the Node SDK is missing: run `npm ci` in tests/e2e/node"
    scripted_server.reset()
    scripted_server.script(Reply(calls=(("get_weather", '{"city": "Paris"}'),)), Reply(text="Sunny."), PARALLEL)
    done = subprocess.run(
        [node, str(NODE_DIR / "responses_check.mjs"), gw.url, GATEWAY_KEY],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def node_ok(outcomes: dict[str, Any], name: str) -> Any:
    assert "error" not in outcomes[name], outcomes[name]
    return outcomes[name]["ok"]


def test_node_create_and_retrieve(node_outcomes: dict[str, Any]) -> None:
    r = node_ok(node_outcomes, "create")
    assert r["text"] == "You said: hello there" and r["sameOnRetrieve"] is True
    assert r["usage"]["output_tokens"] == 4 and r["usage"]["total_tokens"] > 4


def test_node_stream_helper(node_outcomes: dict[str, Any]) -> None:
    r = node_ok(node_outcomes, "streamText")
    assert r["text"] == r["final"] == "You said: stream me"
    assert (r["first"], r["last"]) == ("response.created", "response.completed")
    assert r["usage"]["output_tokens"] == 4


def test_node_tool_round_trip(node_outcomes: dict[str, Any]) -> None:
    r = node_ok(node_outcomes, "toolRoundTrip")
    assert r["call"] == {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "call_0001_0"}
    assert r["text"] == "Sunny."


def test_node_streamed_parallel_calls(node_outcomes: dict[str, Any]) -> None:
    r = node_ok(node_outcomes, "streamParallelCalls")
    assert r["calls"] == [{"type": "function_call", "name": n, "arguments": a} for n, a in PARALLEL.calls]
    assert r["deltas"] > 6


def test_node_cut_stream_raises(node_outcomes: dict[str, Any]) -> None:
    outcome = node_outcomes["cutStream"]
    assert "error" in outcome, outcome
    assert outcome["error"]["isAPIError"]


def test_node_unknown_id_is_not_found(node_outcomes: dict[str, Any]) -> None:
    outcome = node_outcomes["unknownId"]
    assert outcome.get("error", {}).get("class") == "NotFoundError" and outcome["error"]["status"] == 404, outcome
