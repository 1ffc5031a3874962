"""A usage that counts the prompt and leaves the output's count out, on every path an answer takes:
the output that reached the client is charged (once it settled at $0 on these paths), and what
the upstream did count is charged in full, not capped at the admitted estimate."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import create_app
from gateway.config import load_config
from gateway.limits.store import MemoryLimitStore
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.limits.test_app_limits import KEYS

PIECES = ["abcdefgh"] * 10
TEXT = "".join(PIECES)  # 80 characters: 20 tokens, 2,000 micro-$ at $100/M output
ONE = 2_000
SPEND = ("key:one", "total")
AUTH = {"authorization": f"Bearer {KEYS['one']}"}
PROMPT_ONLY = {"prompt_tokens": 10, "total_tokens": 10}


def sse(obj: Any, name: bytes | None = None) -> bytes:
    return (b"event: " + name + b"\n" if name else b"") + b"data: " + orjson.dumps(obj) + b"\n\n"


def chat_chunk(model: str, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def chat_whole(model: str, usage: dict[str, Any]) -> MockResponse:
    whole = {"id": "x", "object": "chat.completion", "created": 1, "model": model, "usage": usage,
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": TEXT}}]}
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(whole))


def upstream(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    model, stream = body["model"], bool(body.get("stream"))
    if request.url.endswith("/responses"):  # a Responses upstream whose usage has no output_tokens
        usage = {"input_tokens": 10, "total_tokens": 10}
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}
        response = {"id": "resp_1", "object": "response", "created_at": 1, "model": model, "status": "completed"}
        if not stream:
            return MockResponse(200, {"content-type": "application/json"},
                                orjson.dumps({**response, "output": [item], "usage": usage}))
        events = [sse({"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
                      b"response.created")]
        events += [sse({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
                        "delta": piece}, b"response.output_text.delta") for piece in PIECES]
        events.append(sse({"type": "response.completed", "response": {**response, "output": [item], "usage": usage}},
                          b"response.completed"))
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=events)
    if model == "big-prompt":  # an image prompt routing under-counts: the upstream's count is 5,000
        return chat_whole(model, {"prompt_tokens": 5000, "total_tokens": 5000})
    if model == "fan":  # the part seeded 0 counts its output, the other leaves the count out
        usage = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30} if body.get("seed") == 0 else PROMPT_ONLY
        if not stream:
            return chat_whole(model, usage)
        chunks = [chat_chunk(model, {"role": "assistant", "content": ""})]
        chunks += [chat_chunk(model, {"content": p}) for p in PIECES] + [chat_chunk(model, {}, "stop")]
        tail = sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [], "usage": usage})
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[*chunks, tail, b"data: [DONE]\n\n"])
    # A chat stream whose prompt-only usage rides on every chunk, the first included.
    chunks = [chat_chunk(model, {"role": "assistant", "content": ""}, usage=PROMPT_ONLY)]
    chunks += [chat_chunk(model, {"content": p}, usage=PROMPT_ONLY) for p in PIECES]
    chunks.append(chat_chunk(model, {}, "stop", usage=PROMPT_ONLY))
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[*chunks, b"data: [DONE]\n\n"])


@pytest.fixture(scope="module")
def loop() -> Iterator[BackgroundLoop]:
    background = BackgroundLoop().start()
    yield background
    background.stop()


@contextmanager
def serving(
    loop: BackgroundLoop, handler: Callable[[UpstreamRequest], MockResponse], deployments: list[dict[str, Any]],
    *, providers: list[dict[str, Any]] | None = None, retry: dict[str, Any] | None = None,
) -> Iterator[tuple[GatewayServer, MemoryLimitStore]]:
    """A gateway over the mock upstream `handler`, key "one" with a $5 total budget, its limit store."""
    settings = load_config(
        environ={},
        auth={"keys": [{"name": "one", "key": KEYS["one"], "budget_usd": 5.0, "budget_period": "total"}]},
        state_store={"backend": "memory"},
        providers=providers or [{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=deployments,
        retry=retry or {"attempts_per_endpoint": 1, "max_attempts": 1},
    )
    store = MemoryLimitStore()
    server = GatewayServer(create_app(settings, client_factory=lambda: MockHTTPClient(handler), limit_store=store), loop)
    try:
        yield server.start(), store
    finally:
        server.stop()


PRICED = {"input": 0.0, "output": 100.0}
FAN = {"native_n": False}
NO_BACKOFF = {"backoff_base": 0.0, "backoff_max": 0.0}


@pytest.fixture
def gateway(loop: BackgroundLoop) -> Iterator[tuple[GatewayServer, MemoryLimitStore]]:
    with serving(loop, upstream, [
        {"model": "m", "provider": "p", "price": PRICED},
        {"model": "fan", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "r", "provider": "p", "price": PRICED, "native": ["responses"]},
        {"model": "big-prompt", "provider": "p", "price": {"input": 100.0, "output": 100.0}},
    ]) as served:
        yield served


def settled(store: MemoryLimitStore, expected: int) -> int:
    deadline = time.monotonic() + 10
    spent = store._spend.get(SPEND, [0])[0]
    while spent != expected and time.monotonic() < deadline:
        time.sleep(0.02)
        spent = store._spend.get(SPEND, [0])[0]
    return int(spent)


def post(gw: GatewayServer, path: str, body: dict[str, Any]) -> bytes:
    with httpx.stream("POST", gw.url + path, headers=AUTH, json=body, timeout=30) as response:
        assert response.status_code == 200, response.read()
        return b"".join(response.iter_bytes())


HI = [{"role": "user", "content": "hi"}]


def test_a_stream_whose_prompt_only_usage_comes_first_is_charged_its_output(gateway: Any) -> None:
    gw, store = gateway
    assert post(gw, "/chat/completions", {"model": "m", "messages": HI, "stream": True, "max_tokens": 300}).count(b"abcdefgh") == 10
    assert settled(store, ONE) == ONE


@pytest.mark.parametrize("stream", [False, True])
def test_a_native_response_without_output_tokens_is_charged_its_output(gateway: Any, stream: bool) -> None:
    gw, store = gateway
    body = {"model": "r", "input": "hi", "store": False, "max_output_tokens": 300, "stream": stream}
    assert post(gw, "/responses", body).count(b"abcdefgh") >= 1
    assert settled(store, ONE) == ONE


@pytest.mark.parametrize("stream", [False, True])
def test_a_fan_out_part_without_an_output_count_adds_its_output(gateway: Any, stream: bool) -> None:
    """n = 2 on an endpoint without native n: part 0 counted 20 tokens, part 1 sent 80 characters
    without a count: 40 tokens, not the larger of the two."""
    gw, store = gateway
    body = {"model": "fan", "messages": HI, "n": 2, "seed": 0, "max_tokens": 300, "stream": stream,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    assert post(gw, "/chat/completions", body).count(b"abcdefgh") == 20
    assert settled(store, 2 * ONE) == 2 * ONE


def test_a_counted_prompt_is_charged_in_full_beside_an_estimated_output(gateway: Any) -> None:
    """5,000 prompt tokens counted by the upstream ($0.50), 80 characters of output estimated at 20
    tokens ($0.002): 502,000 micro-$, where capping the whole at the admitted estimate (a few prompt
    tokens and max_tokens 50) charged 6,300."""
    gw, store = gateway
    post(gw, "/chat/completions", {"model": "big-prompt", "messages": HI, "max_tokens": 50})
    assert settled(store, 500_000 + 2_000) == 500_000 + 2_000


# -- parts and prompts the upstream counted apart (second review) ---------------------------------

CALLS: dict[str, int] = {}
COUNTED = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}


def parts_upstream(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    model = body["model"]
    CALLS[model] = CALLS.get(model, 0) + 1
    if request.url.endswith("/messages"):  # 5,000 prompt tokens counted at message_start, then the stream breaks
        start = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": model,
                 "usage": {"input_tokens": 5000, "output_tokens": 1}}
        events = [sse({"type": "message_start", "message": start}, b"message_start"),
                  sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                      b"content_block_start")]
        events += [sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                       b"content_block_delta") for p in PIECES]
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=events)
    if model == "fan-none":  # the part seeded 0 counts everything, the other reports no usage at all
        if body.get("seed") == 0:
            return chat_whole(model, COUNTED)
        whole = orjson.loads(chat_whole(model, COUNTED).body)
        del whole["usage"]
        return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(whole))
    # fan-retry: the first attempt's second part fails; every answer leaves the output's count out
    if CALLS[model] == 2:
        return MockResponse(500, {"content-type": "application/json"}, b'{"error": {"message": "engine crashed"}}')
    return chat_whole(model, PROMPT_ONLY if model == "fan-retry" else COUNTED)


@pytest.fixture
def parts_gateway(loop: BackgroundLoop) -> Iterator[tuple[GatewayServer, MemoryLimitStore]]:
    CALLS.clear()
    with serving(loop, parts_upstream, [
        {"model": "fan-none", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "fan-retry", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "fan-retry-counted", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "claude", "provider": "a", "price": {"input": 100.0, "output": 100.0}},
    ], providers=[{"name": "p", "base_url": "http://p.test/v1"},
                  {"name": "a", "kind": "anthropic", "base_url": "http://a.test/v1"}],
       retry={"attempts_per_endpoint": 2, "max_attempts": 2, **NO_BACKOFF}) as served:
        yield served


def test_a_fan_out_part_without_usage_keeps_the_counted_parts_output(parts_gateway: Any) -> None:
    gw, store = parts_gateway
    body = {"model": "fan-none", "messages": HI, "n": 2, "seed": 0, "max_tokens": 300}
    assert post(gw, "/chat/completions", body).count(b"abcdefgh") == 20
    assert settled(store, 2 * ONE) == 2 * ONE  # 20 counted, 80 characters more: not the uncounted part's alone


@pytest.mark.parametrize("model", ["fan-retry", "fan-retry-counted"])
def test_a_fan_out_retried_after_a_part_failed_charges_the_answer_only(parts_gateway: Any, model: str) -> None:
    """The failed attempt's answered part reached no client: uncounted, it costs what counted costs."""
    gw, store = parts_gateway
    body = {"model": model, "messages": HI, "n": 2, "seed": 0, "max_tokens": 300}
    assert post(gw, "/chat/completions", body).count(b"abcdefgh") == 20
    assert CALLS[model] == 4
    assert settled(store, 2 * ONE) == 2 * ONE


def test_a_prompt_counted_before_a_broken_stream_is_charged_in_full(parts_gateway: Any) -> None:
    """message_start counted 5,000 prompt tokens ($0.50); the stream broke before its usage: the
    prompt is charged in full beside the estimated output (it settled at the admitted 6,200)."""
    gw, store = parts_gateway
    with httpx.stream("POST", gw.url + "/chat/completions", headers=AUTH, timeout=30,
                      json={"model": "claude", "messages": HI, "max_tokens": 50, "stream": True}) as response:
        assert b"".join(response.iter_bytes()).count(b"abcdefgh") == 10
    assert settled(store, 502_000) == 502_000


# -- fan-outs that fail part-way or fall back (third review) ----------------------------------------

ATTEMPTS: dict[str, int] = {}


def stream_of(model: str, usage: dict[str, Any] | None, *, done: bool = True) -> MockResponse:
    chunks = [chat_chunk(model, {"role": "assistant", "content": ""})]
    chunks += [chat_chunk(model, {"content": p}) for p in PIECES]
    if not done:  # breaks after the text
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)
    chunks.append(chat_chunk(model, {}, "stop"))
    if usage is not None:
        chunks.append(sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": model,
                           "choices": [], "usage": usage}))
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[*chunks, b"data: [DONE]\n\n"])


def failing_upstream(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    model = body["model"]
    key = model + ("@" + request.url.split("//")[1].split("/")[0])
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if model == "fan-500":  # part 0 counts its output; part 1's request fails
        if body.get("seed") == 0:
            return stream_of(model, COUNTED)
        return MockResponse(500, {"content-type": "application/json"}, b'{"error": {"message": "engine crashed"}}')
    if model == "fan-break":  # part 0 counts its output; part 1 streams its text and breaks
        return stream_of(model, COUNTED, done=body.get("seed") == 0)
    if model == "mixed":
        if "a.test" in request.url:  # fan-out endpoint: part 0 answers without usage, part 1 fails
            if body.get("seed") == 0:
                whole = orjson.loads(chat_whole(model, COUNTED).body)
                del whole["usage"]
                return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(whole))
            return MockResponse(500, {"content-type": "application/json"}, b'{"error": {"message": "engine crashed"}}')
        # native-n endpoint: one answer of two choices, 80 chars each, usage without completion_tokens
        whole = orjson.loads(chat_whole(model, PROMPT_ONLY).body)
        whole["choices"].append({**whole["choices"][0], "index": 1})
        return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(whole))
    raise AssertionError(model)


@pytest.fixture
def failing_gateway(loop: BackgroundLoop) -> Iterator[tuple[GatewayServer, MemoryLimitStore]]:
    ATTEMPTS.clear()
    with serving(loop, failing_upstream, [
        {"model": "fan-500", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "fan-break", "provider": "p", "price": PRICED, "capabilities": FAN},
        {"model": "mixed", "provider": "a", "price": PRICED, "capabilities": FAN},
        {"model": "mixed", "provider": "b", "price": PRICED},
    ], providers=[{"name": n, "base_url": f"http://{n}.test/v1"} for n in ("p", "a", "b")],
       retry={"attempts_per_endpoint": 1, "max_attempts": 2, **NO_BACKOFF}) as served:
        yield served


def sent(g: GatewayServer, body: dict[str, Any]) -> bytes:
    with httpx.stream("POST", g.url + "/chat/completions", headers=AUTH, json=body, timeout=30) as r:
        return b"".join(r.iter_bytes())


@pytest.mark.parametrize("model", ["fan-500", "fan-break"])
def test_a_streamed_fan_out_whose_later_part_fails_charges_what_went_out(failing_gateway: Any, model: str) -> None:
    g, store = failing_gateway
    """Part 0 counted its 20 tokens; part 1 failed to start (500) or broke after its 80 characters.
    Once the counted part's text was taken out of the counters, its output went free (0 and 2,000)."""
    sent(g, {"model": model, "messages": HI, "n": 2, "seed": 0, "max_tokens": 300, "stream": True,
             "stream_options": {"include_usage": True}})
    # part 0: 20 tokens counted by the upstream (2,000 micro-$); fan-break: + part 1's 80 chars (2,000)
    expected = ONE if model == "fan-500" else 2 * ONE
    assert settled(store, expected) == expected


def test_a_fan_out_that_falls_back_to_an_endpoint_with_native_n_charges_the_answer_only(failing_gateway: Any) -> None:
    g, store = failing_gateway
    """The fan-out's answered part on endpoint a reached no client: the answer from b is what
    counts (the failed attempt's text was counted on top: 6,000)."""
    out = sent(g, {"model": "mixed", "messages": HI, "n": 2, "seed": 0, "max_tokens": 300,
                   "provider": {"order": ["a", "b"]}})
    assert out.count(b"abcdefgh") == 20
    assert settled(store, 2 * ONE) == 2 * ONE  # the client got 160 chars = 40 tokens


def ordered_upstream(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    model = body["model"]
    if model == "rev":  # part 0 leaves the output count out, part 1 counts it
        return stream_of(model, PROMPT_ONLY if body.get("seed") == 0 else COUNTED)
    # "cont": part 0 sends usage with a running output count on every chunk (the first included);
    # part 1 sends prompt-only usage
    if body.get("seed") == 0:
        chunks = [chat_chunk(model, {"role": "assistant", "content": ""}, usage={**COUNTED, "completion_tokens": 0, "total_tokens": 10})]
        chunks += [chat_chunk(model, {"content": p}, usage={**COUNTED, "completion_tokens": 2 * (i + 1)}) for i, p in enumerate(PIECES)]
        chunks.append(chat_chunk(model, {}, "stop", usage=COUNTED))
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[*chunks, b"data: [DONE]\n\n"])
    return stream_of(model, PROMPT_ONLY)


@pytest.fixture
def ordered_gateway(loop: BackgroundLoop) -> Iterator[tuple[GatewayServer, MemoryLimitStore]]:
    with serving(loop, ordered_upstream,
                 [{"model": m, "provider": "p", "price": PRICED, "capabilities": FAN} for m in ("rev", "cont")]) as served:
        yield served


@pytest.mark.parametrize("model", ["rev", "cont"])
@pytest.mark.parametrize("usage", [True, False])
def test_a_streamed_fan_out_counts_each_part_once_whatever_reports_its_output(ordered_gateway: Any, model: str, usage: bool) -> None:
    g, store = ordered_gateway
    body = {"model": model, "messages": HI, "n": 2, "seed": 0, "max_tokens": 300, "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    assert sent(g, body).count(b"abcdefgh") == 20
    assert settled(store, 2 * ONE) == 2 * ONE
