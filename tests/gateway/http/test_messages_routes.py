"""/v1/messages over real sockets: a client that hangs up cancels the upstream work it started and
is accounted once, as on /v1/chat/completions. /v1/messages/count_tokens with the official SDK:
exact from a llama-server endpoint of the model (a fake speaking its /apply-template and
/tokenize), else the gateway's estimate, each saying which."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import anthropic
import httpx
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import load_config
from gateway.routing.tokens import TokenCounter
from gateway.state import AppState
from gateway.translate.anthropic_request import to_chat
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import GatewayServer
from tests.gateway.http.test_openai_routes import HangingUpstream, served, wait_until
from tests.gateway.pipeline.test_count import fake_llama_server

__all__ = ["served"]  # the fixture, shared with the chat route's tests


def messages_request(port: int, body: dict[str, object]) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/messages HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
        + f"content-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_a_messages_client_that_hangs_up_cancels_the_upstream_work(
    served: tuple[GatewayServer, HangingUpstream],
) -> None:
    server, upstream = served
    sock = messages_request(
        server.port, {"model": "one", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    wait_until(lambda: upstream.arrived == 1)
    sock.close()
    wait_until(lambda: upstream.cancelled == 1)
    time.sleep(0.1)
    assert (upstream.arrived, upstream.cancelled) == (1, 1)
    with httpx.Client(base_url=server.root) as http:
        metrics = http.get("/metrics").text
    gone = [
        ln
        for ln in metrics.splitlines()
        if ln.startswith("gateway_request_errors_total{") and "ClientDisconnected" in ln
    ]
    assert len(gone) == 1 and gone[0].endswith(" 1.0")


KEY = "sk-count-tokens-0001"
COUNT = {"model": "local", "system": "Be brief.", "messages": [{"role": "user", "content": "one two three"}]}


def engines(request: UpstreamRequest) -> MockResponse:
    if request.url.startswith("http://old-engine.test"):  # a llama-server without the routes
        return MockResponse(404, {"content-type": "application/json"}, b'{"error": {"message": "File Not Found"}}')
    return fake_llama_server(request)


PRIVATE = "sk-count-tokens-eu-only"
US_ENGINE, EU_ENGINE = "http://us-engine.test", "http://eu-engine.test"


@pytest.fixture
def counting() -> Iterator[tuple[TestClient, MockHTTPClient]]:
    config = load_config(
        environ={},
        auth={"keys": [{"name": "counting", "key": KEY}, {"name": "private", "key": PRIVATE}]},
        routing={"keys": {"private": {"regions": ["eu"], "data_collection": "deny"}}},
        providers=[
            {"name": "engine", "kind": "llamacpp", "base_url": "http://engine.test:8001/v1"},
            {"name": "old", "kind": "llamacpp", "base_url": "http://old-engine.test/v1"},
            {"name": "cloud", "kind": "openai", "base_url": "http://cloud.test/v1"},
            {
                "name": "us-engine",
                "kind": "llamacpp",
                "base_url": f"{US_ENGINE}/v1",
                "region": "us",
                "keeps_prompts": True,
            },
            {"name": "eu-engine", "kind": "llamacpp", "base_url": f"{EU_ENGINE}/v1", "region": "eu"},
        ],
        deployments=[
            {"model": "local", "provider": "engine", "upstream_model": "smollm2"},
            {"model": "native-local", "provider": "engine", "upstream_model": "smollm2", "native": ["messages"]},
            {"model": "old-local", "provider": "old", "upstream_model": "smollm2"},
            {"model": "remote", "provider": "cloud", "upstream_model": "gpt"},
            {"model": "us-only", "provider": "us-engine", "upstream_model": "smollm2"},
            {"model": "both", "provider": "us-engine", "upstream_model": "smollm2"},
            {"model": "both", "provider": "eu-engine", "upstream_model": "smollm2"},
        ],
    )
    client = MockHTTPClient(engines)
    with TestClient(create_app(config, client_factory=lambda: client)) as http:
        yield http, client


def anthropic_sdk(http: TestClient, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(http.base_url), api_key=key, http_client=http, max_retries=0)


@pytest.fixture
def sdk(counting: tuple[TestClient, MockHTTPClient]) -> anthropic.Anthropic:
    return anthropic_sdk(counting[0])


def sent_to(client: MockHTTPClient, root: str) -> list[str]:
    return [r.url for r in client.requests if r.url.startswith(root)]


def estimate(request: dict[str, object]) -> int:
    chat = to_chat(request, counting=True).body
    return TokenCounter().count_chat(chat["messages"], chat.get("tools"))


def test_count_tokens_is_exact_where_the_engine_counts(sdk: anthropic.Anthropic) -> None:
    raw = sdk.messages.with_raw_response.count_tokens(**COUNT)  # type: ignore[arg-type]
    # The fake's template: "<|system|> Be brief. <|end|> <|user|> one two three <|end|>", split on spaces.
    assert raw.parse().input_tokens == 4 + 5
    assert raw.headers["x-gateway-token-count"] == "exact; counted by endpoint engine/local"


def test_count_tokens_estimates_for_other_upstreams_and_says_so(sdk: anthropic.Anthropic) -> None:
    request = {**COUNT, "model": "remote"}
    raw = sdk.messages.with_raw_response.count_tokens(**request)  # type: ignore[arg-type]
    assert raw.parse().input_tokens == estimate(request)
    assert raw.headers["x-gateway-token-count"].startswith("estimate; cl100k_base")


def test_count_tokens_falls_back_to_the_estimate_when_the_engine_cannot_count(sdk: anthropic.Anthropic) -> None:
    request = {**COUNT, "model": "old-local"}
    raw = sdk.messages.with_raw_response.count_tokens(**request)  # type: ignore[arg-type]
    assert raw.parse().input_tokens == estimate(request)
    method = raw.headers["x-gateway-token-count"]
    assert method.startswith("estimate; cl100k_base") and "endpoint old/old-local could not count" in method


def test_count_tokens_never_sends_the_prompt_where_the_key_may_not(counting: tuple[TestClient, MockHTTPClient]) -> None:
    """The key allows region eu only and denies data collection: the us endpoint (which may keep
    prompts) gets nothing from count_tokens either, as it gets nothing from messages.create."""
    http, client = counting
    private = anthropic_sdk(http, PRIVATE)
    request = {**COUNT, "model": "us-only"}
    raw = private.messages.with_raw_response.count_tokens(**request)  # type: ignore[arg-type]
    assert raw.parse().input_tokens == estimate(request)
    method = raw.headers["x-gateway-token-count"]
    assert method.startswith("estimate; cl100k_base") and "endpoint us-engine/us-only ruled out (region)" in method
    with pytest.raises(anthropic.BadRequestError, match="region"):
        private.messages.create(max_tokens=8, **request)  # type: ignore[arg-type]
    assert sent_to(client, US_ENGINE) == []


def test_count_tokens_counts_exactly_on_an_allowed_endpoint(counting: tuple[TestClient, MockHTTPClient]) -> None:
    http, client = counting
    raw = anthropic_sdk(http, PRIVATE).messages.with_raw_response.count_tokens(**{**COUNT, "model": "both"})  # type: ignore[arg-type]
    assert raw.parse().input_tokens == 4 + 5
    assert raw.headers["x-gateway-token-count"] == "exact; counted by endpoint eu-engine/both"
    assert sent_to(client, US_ENGINE) == [] and sent_to(client, EU_ENGINE) == [
        f"{EU_ENGINE}/apply-template",
        f"{EU_ENGINE}/tokenize",
    ]
    # The same key's provider preferences bind too: ignoring the eu engine leaves nothing to count on.
    raw = anthropic_sdk(http, PRIVATE).messages.with_raw_response.count_tokens(  # type: ignore[call-overload]
        **{**COUNT, "model": "both"}, extra_body={"provider": {"ignore": ["eu-engine"]}}
    )
    assert raw.headers["x-gateway-token-count"].startswith("estimate; cl100k_base")
    assert "endpoint eu-engine/both ruled out (pref_ignored)" in raw.headers["x-gateway-token-count"]
    assert len(sent_to(client, EU_ENGINE)) == 2 and sent_to(client, US_ENGINE) == []


def test_count_tokens_skips_a_demoted_endpoint(counting: tuple[TestClient, MockHTTPClient]) -> None:
    http, client = counting
    state: AppState = http.app_state["gw"]
    assert http.portal is not None
    http.portal.call(
        lambda: state.health.transition("engine/local", "demoted", source="manual", reason="ops", at=0.0, operator=True)
    )
    raw = anthropic_sdk(http).messages.with_raw_response.count_tokens(**COUNT)  # type: ignore[arg-type]
    assert raw.parse().input_tokens == estimate(COUNT)
    assert "endpoint engine/local ruled out (health_demoted)" in raw.headers["x-gateway-token-count"]
    assert sent_to(client, "http://engine.test") == []


TWO_CALLS = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "smollm2",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in (1, 2)
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "smollm2",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 1},
}


def test_llama_server_is_sent_a_single_call_request_translated_not_as_is() -> None:
    # llama-server ignores disable_parallel_tool_use on /v1/messages: the adapter declines such a body,
    # and the translation (parallel_tool_calls: false, the first call kept) holds the answer to one call.
    def engine(request: UpstreamRequest) -> MockResponse:
        answer = MESSAGE if request.url.endswith("/messages") else TWO_CALLS
        return MockResponse(200, {"content-type": "application/json"}, json.dumps(answer).encode())

    config = load_config(
        environ={},
        auth={"keys": [{"name": "k", "key": KEY}]},
        providers=[{"name": "engine", "kind": "llamacpp", "base_url": "http://engine.test:8001/v1"}],
        deployments=[{"model": "local", "provider": "engine", "upstream_model": "smollm2", "native": ["messages"]}],
    )
    client = MockHTTPClient(engine)
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    hello = [{"role": "user", "content": "hi"}]
    with TestClient(create_app(config, client_factory=lambda: client)) as http:
        sdk = anthropic_sdk(http)
        single = sdk.messages.create(
            model="local",
            max_tokens=8,
            messages=hello,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        )
        assert [b.type for b in single.content] == ["tool_use"]
        assert client.requests[-1].url.endswith("/chat/completions")
        assert json.loads(client.requests[-1].body)["parallel_tool_calls"] is False
        sdk.messages.create(model="local", max_tokens=8, messages=hello, tools=tools)  # type: ignore[arg-type]
        assert client.requests[-1].url.endswith("/messages")  # otherwise as is


def test_count_tokens_counts_what_messages_would_pass_through(sdk: anthropic.Anthropic) -> None:
    # A document chat cannot carry: counted (the estimate of the chat view holding it as text) where
    # /v1/messages would take it as is, refused where it would be refused.
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "word " * 2000}}
    messages = [{"role": "user", "content": [document, {"type": "text", "text": "Summarise"}]}]
    raw = sdk.messages.with_raw_response.count_tokens(model="native-local", messages=messages)  # type: ignore[arg-type]
    assert raw.parse().input_tokens > 2000 and raw.headers["x-gateway-token-count"].startswith("estimate;")
    with pytest.raises(anthropic.BadRequestError, match="document"):
        sdk.messages.count_tokens(model="local", messages=messages)  # type: ignore[arg-type]
