"""A stream whose usage never arrives still costs what it relayed: the upstream ignored
include_usage, broke after output went out, or the client left after finish_reason before the
usage chunk. Each once settled at $0 (a budget bypass); now at an estimate from the relayed
output (capped at the worst case), on /v1/chat/completions, /v1/messages and /v1/responses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.app import create_app
from gateway.limits.store import MemoryLimitStore
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.limits.test_app_limits import KEYS, settings

# 10 chunks of 8 characters: 80 characters, estimated at 20 completion tokens ($0.002 at $100/M).
PIECES = ["abcdefgh"] * 10
ESTIMATE_MICRO = 2_000
SPEND = ("key:one", "total")  # key "one": a $0.50 total budget, one request at a time


class Stalling(MockResponse):
    """Sends its chunks, then stalls for a minute before the rest (the usage chunk): long past
    the client, which has left by then."""

    stall_after: int = 0

    async def chunks_iter(self) -> AsyncIterator[bytes]:
        assert self.chunks is not None
        for i, part in enumerate(self.chunks):
            if i == self.stall_after:
                await asyncio.sleep(60)
            await asyncio.sleep(0)
            assert isinstance(part, bytes)
            yield part


def upstream(mode: str) -> Callable[[UpstreamRequest], MockResponse]:
    def handle(request: UpstreamRequest) -> MockResponse:
        model = orjson.loads(request.body)["model"]

        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + orjson.dumps(obj) + b"\n\n"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return event({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model,
                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        body = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": p}) for p in PIECES]
        usage = event({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}})
        headers = {"content-type": "text/event-stream"}
        if mode == "prompt-only":  # counts the prompt and leaves completion_tokens out
            counted = {"prompt_tokens": 10, "total_tokens": 10}
            if not orjson.loads(request.body).get("stream"):
                whole = {"id": "x", "object": "chat.completion", "created": 1, "model": model, "usage": counted,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "".join(PIECES)}}]}
                return MockResponse(200, {"content-type": "application/json"}, body=orjson.dumps(whole))
            tail = event({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
                          "usage": counted})
            return MockResponse(200, headers, chunks=[*body, chunk({}, "stop"), tail, b"data: [DONE]\n\n"])
        if mode == "no-usage":
            return MockResponse(200, headers, chunks=[*body, chunk({}, "stop"), b"data: [DONE]\n\n"])
        if mode == "error":
            return MockResponse(200, headers, chunks=[*body, event({"error": {"message": "engine crashed"}})])
        stalling = Stalling(200, headers, chunks=[*body, chunk({}, "stop"), usage, b"data: [DONE]\n\n"])
        stalling.stall_after = len(body) + 1  # after finish_reason, before the usage chunk
        return stalling

    return handle


@pytest.fixture(scope="module")
def loop() -> Iterator[BackgroundLoop]:
    background = BackgroundLoop().start()
    yield background
    background.stop()


@pytest.fixture
def gateway(loop: BackgroundLoop) -> Iterator[Callable[[str], tuple[GatewayServer, MemoryLimitStore]]]:
    started: list[GatewayServer] = []

    def run(mode: str) -> tuple[GatewayServer, MemoryLimitStore]:
        store = MemoryLimitStore()
        app = create_app(settings({"backend": "memory"}), client_factory=lambda: MockHTTPClient(upstream(mode)), limit_store=store)
        server = GatewayServer(app, loop).start()
        started.append(server)
        return server, store

    yield run
    for server in started:
        server.stop()


def settled(store: MemoryLimitStore, expected: int) -> int:
    """The key's spend once settlement lands (just after the gateway notices the stream is over)."""
    deadline = time.monotonic() + 10
    spent = store._spend[SPEND][0]
    while spent != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        spent = store._spend[SPEND][0]
    return int(spent)


def chat(gw: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS["one"], max_retries=0, timeout=30)


HELLO = [{"role": "user", "content": "hi"}]


def test_a_chat_stream_without_usage_is_charged_its_relayed_output(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("no-usage")
    with chat(gw) as c:
        text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="m", messages=HELLO, max_tokens=300, stream=True) if ch.choices)
    assert text == "".join(PIECES)
    assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO  # not $0, not the $0.03 worst case


def test_a_chat_stream_broken_after_output_is_charged_its_relayed_output(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("error")
    with chat(gw) as c, pytest.raises(openai.APIError):
        for _ in c.chat.completions.create(model="m", messages=HELLO, max_tokens=300, stream=True):
            pass
    assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO


def test_a_client_leaving_after_finish_reason_before_usage_is_charged(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("stall")
    with chat(gw) as c:
        stream = c.chat.completions.create(model="m", messages=HELLO, max_tokens=300, stream=True,
                                           stream_options={"include_usage": True})
        for ch in stream:
            if ch.choices and ch.choices[0].finish_reason:
                break
        stream.close()
    assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO


def test_the_estimate_is_capped_at_the_admitted_worst_case(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("no-usage")
    with chat(gw) as c:
        for _ in c.chat.completions.create(model="m", messages=HELLO, max_tokens=5, stream=True):
            pass  # 80 characters relayed although max_tokens was 5 (a misbehaving upstream)
    assert settled(store, 500) == 500  # 5 tokens at $100/M: the worst case admitted


def test_a_messages_stream_without_usage_is_charged(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("no-usage")
    body = {"model": "m", "max_tokens": 300, "stream": True, "messages": HELLO}
    with httpx.Client(base_url=gw.root, timeout=30) as http:
        answer = http.post("/v1/messages", json=body, headers={"x-api-key": KEYS["one"], "anthropic-version": "2023-06-01"})
    assert answer.status_code == 200 and "abcdefgh" in answer.text
    assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO


def test_a_responses_stream_without_usage_is_charged(gateway: Callable[..., Any]) -> None:
    gw, store = gateway("no-usage")
    with chat(gw) as c:
        events = list(c.responses.create(model="m", input="hi", max_output_tokens=300, stream=True, store=False))
    assert events[-1].type == "response.completed"
    assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO


def test_a_usage_without_an_output_count_is_charged_its_relayed_output(gateway: Callable[..., Any]) -> None:
    """An upstream that counts the prompt but leaves `completion_tokens` out: the output is not free
    (it once settled at $0), streamed or whole."""
    gw, store = gateway("prompt-only")
    with chat(gw) as c:
        text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="m", messages=HELLO, max_tokens=300, stream=True, stream_options={"include_usage": True}) if ch.choices)
        assert text == "".join(PIECES)
        assert settled(store, ESTIMATE_MICRO) == ESTIMATE_MICRO
        whole = c.chat.completions.create(model="m", messages=HELLO, max_tokens=300)
    assert whole.choices[0].message.content == "".join(PIECES)
    assert settled(store, 2 * ESTIMATE_MICRO) == 2 * ESTIMATE_MICRO  # 80 characters: 20 tokens again
