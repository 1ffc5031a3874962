"""Limits and budgets through the whole gateway, seen by the official openai SDK: two gateway
replicas sharing the real Redis enforce one limit together, 400 concurrent requests cannot
overspend a $1.00 budget, and each refusal is the SDK's typed error with OpenAI's headers."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import openai
import orjson
import pytest

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.limits.policy import period_bounds
from gateway.limits.store import MemoryLimitStore
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.state_store.redis_helpers import (
    REDIS_URL,
    delete_prefix,
    redis_available,
    unique_prefix,
)
from tests.services import require

KEYS = {name: f"sk-limits-{name}-000001" for name in ("rpm", "budget", "narrow", "old", "free", "one", "rated")}
HELLO = [{"role": "user", "content": "hi"}]


def answer(request: UpstreamRequest) -> MockResponse:
    """100 completion tokens at $100/M: $0.01 an answer, exactly the worst case of max_tokens=100."""
    body = orjson.loads(request.body)
    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    if body.get("stream"):
        events = [
            {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
             "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]},
            {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": body["model"], "choices": [], "usage": usage},
        ]
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)
    reply = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage,
    }
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(reply))


def answer_any(request: UpstreamRequest) -> MockResponse:
    """Chat as `answer`; a legacy completion and embeddings in their own wire formats."""
    body = orjson.loads(request.body)
    usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
    if request.url.endswith("/embeddings"):
        data = [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]
        reply: dict[str, Any] = {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 2, "total_tokens": 2}}
    elif request.url.endswith("/completions") and not request.url.endswith("/chat/completions"):
        choice = {"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}
        reply = {"id": "x", "object": "text_completion", "created": 1, "model": body["model"], "choices": [choice], "usage": usage}
    else:
        return answer(request)
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(reply))


def settings(state_store: dict[str, Any]) -> Settings:
    return load_config(
        environ={},
        auth={
            "keys": [
                {"name": "rpm", "key": KEYS["rpm"], "rpm": 10},
                {"name": "budget", "key": KEYS["budget"], "budget_usd": 1.0, "budget_period": "daily"},
                {"name": "narrow", "key": KEYS["narrow"], "allowed_models": ["other-*"]},
                {"name": "old", "key": KEYS["old"], "expires_at": "2020-01-01T00:00:00Z"},
                {"name": "free", "key": KEYS["free"]},
                {"name": "one", "key": KEYS["one"], "max_parallel": 1, "budget_usd": 0.5, "budget_period": "total"},
                {"name": "rated", "key": KEYS["rated"], "tpm": 100_000, "team": "squad"},
            ]
        },
        limits={"teams": {"squad": {"rpm": 50}}},
        state_store=state_store,
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[
            {"model": "m", "provider": "p", "price": {"input": 0.0, "output": 100.0}},
            {"model": "e", "provider": "p", "capabilities": {"modes": ["embeddings"]}},
        ],
        retry={"attempts_per_endpoint": 1, "max_attempts": 1},
    )


@pytest.fixture(scope="module")
def loop() -> Iterator[BackgroundLoop]:
    background = BackgroundLoop().start()
    yield background
    background.stop()


@pytest.fixture
def start(loop: BackgroundLoop) -> Iterator[Callable[..., GatewayServer]]:
    started: list[GatewayServer] = []

    def run(cfg: Settings, **kw: Any) -> GatewayServer:
        server = GatewayServer(create_app(cfg, client_factory=lambda: MockHTTPClient(answer_any), **kw), loop).start()
        started.append(server)
        return server

    yield run
    for server in started:
        server.stop()


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    yield prefix
    delete_prefix(prefix)


@pytest.fixture
def replicas(start: Callable[..., GatewayServer], redis_prefix: str) -> tuple[GatewayServer, GatewayServer]:
    # These tests prove what a healthy Redis enforces. Both replicas and 400 clients share one loaded
    # CI machine: a 1 s connect timeout once expired there, the limits went local-only (as configured
    # for an outage) and 104 were admitted. 10 s is far above any wait of a Redis that answers.
    cfg = settings({"backend": "redis", "url": REDIS_URL, "key_prefix": redis_prefix, "timeout_s": 10.0})
    return start(cfg), start(cfg)


def client(gw: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url, api_key=KEYS[key], max_retries=0, timeout=30)


@pytest.mark.services
def test_two_replicas_enforce_one_rpm_limit(replicas: tuple[GatewayServer, GatewayServer]) -> None:
    clients = [client(gw, "rpm") for gw in replicas]
    for i in range(10):
        raw = clients[i % 2].chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5)
        # Each answer says what is left, counted across both replicas (no extra store call).
        assert raw.headers["x-ratelimit-remaining-requests"] == str(9 - i)
        assert raw.headers["x-ratelimit-limit-requests"] == "10"
    with pytest.raises(openai.RateLimitError) as refused:
        clients[0].chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    with pytest.raises(openai.RateLimitError):
        clients[1].chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    exc = refused.value
    assert exc.status_code == 429 and exc.code == "rate_limit_exceeded"
    assert exc.body["type"] == "rate_limit_error"  # type: ignore[index]
    h = exc.response.headers
    assert h["x-ratelimit-limit-requests"] == "10" and h["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(h["retry-after"]) <= 60 and h["x-ratelimit-reset-requests"].endswith("s")
    assert h["x-request-id"]
    # Another key is not affected.
    with client(replicas[0], "free") as free:
        free.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    for c in clients:
        c.close()


@pytest.mark.services
async def test_400_concurrent_requests_cannot_overspend_a_budget(
    replicas: tuple[GatewayServer, GatewayServer], redis_prefix: str
) -> None:
    """$1.00 budget, $0.01 a request (its worst case and its actual cost): at most 100 are
    admitted across both replicas, the rest get insufficient_quota, and the spend is $1.00."""
    clients = [openai.AsyncOpenAI(base_url=gw.url, api_key=KEYS["budget"], max_retries=0, timeout=60) for gw in replicas]

    async def one(i: int) -> str:
        try:
            await clients[i % 2].chat.completions.create(model="m", messages=HELLO, max_tokens=100)
        except openai.RateLimitError as exc:
            assert exc.code == "insufficient_quota" and exc.response.headers["x-should-retry"] == "false"
            return "quota"
        return "ok"

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(one(i) for i in range(400)))
    elapsed = time.perf_counter() - started
    for c in clients:
        await c.close()
    assert outcomes.count("ok") == 100 and outcomes.count("quota") == 300, (outcomes.count("ok"), elapsed)
    import redis

    r = redis.Redis.from_url(REDIS_URL)
    try:
        period = period_bounds("daily", time.time())[0]
        deadline = time.monotonic() + 5
        while True:  # settlements land just after each answer
            spent = int(r.get(f"{redis_prefix}lim:bud:key:budget:{period}") or 0)
            if spent == 1_000_000 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    finally:
        r.close()
    assert spent == 1_000_000  # micro-dollars: $1.00 to the cent (and below it, to the micro-dollar)


def test_model_not_allowed_is_403_and_an_expired_key_401(start: Callable[..., GatewayServer]) -> None:
    gw = start(settings({"backend": "memory"}))
    with client(gw, "narrow") as narrow, pytest.raises(openai.PermissionDeniedError) as denied:
        narrow.chat.completions.create(model="m", messages=HELLO)
    assert denied.value.status_code == 403 and denied.value.code == "model_not_allowed"
    with client(gw, "old") as old, pytest.raises(openai.AuthenticationError) as expired:
        old.chat.completions.create(model="m", messages=HELLO)
    assert expired.value.status_code == 401 and "expired" in expired.value.message


def test_memory_store_one_replica_budget_and_rpm(start: Callable[..., GatewayServer]) -> None:
    store = MemoryLimitStore()
    gw = start(settings({"backend": "memory"}), limit_store=store)
    c = client(gw, "budget")
    for _ in range(100):
        c.chat.completions.create(model="m", messages=HELLO, max_tokens=100)
    with pytest.raises(openai.RateLimitError) as refused:
        c.chat.completions.create(model="m", messages=HELLO, max_tokens=100)
    assert refused.value.code == "insufficient_quota" and "daily budget" in refused.value.message
    rpm = client(gw, "rpm")
    for _ in range(10):
        rpm.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    with pytest.raises(openai.RateLimitError) as limited:
        rpm.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    assert limited.value.code == "rate_limit_exceeded"
    c.close()
    rpm.close()


def test_a_stream_settles_when_it_ends(start: Callable[..., GatewayServer]) -> None:
    """The parallel slot comes back and the spend becomes the actual cost once the stream is over."""
    store = MemoryLimitStore()
    gw = start(settings({"backend": "memory"}), limit_store=store)
    c = client(gw, "one")
    for _ in range(3):  # one at a time: each stream must give its slot back
        chunks = list(c.chat.completions.create(model="m", messages=HELLO, max_tokens=300, stream=True))
        assert chunks
    deadline = time.monotonic() + 5
    while store._spend[("key:one", "total")][0] != 30_000 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store._spend[("key:one", "total")][0] == 30_000  # 3 x $0.01, not 3 x the $0.03 worst case
    c.close()


def test_fail_closed_without_redis_refuses_limited_keys_and_says_so_in_readyz(start: Callable[..., GatewayServer]) -> None:
    import httpx

    cfg = settings({"backend": "redis", "url": "redis://127.0.0.1:1/0", "timeout_s": 0.05})
    cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"on_store_failure": "closed"})})
    gw = start(cfg)
    with client(gw, "rpm") as limited, pytest.raises(openai.InternalServerError) as refused:
        limited.chat.completions.create(model="m", messages=HELLO, max_tokens=5)
    assert refused.value.status_code == 503 and refused.value.code == "limits_unavailable"
    with client(gw, "free") as free:
        free.chat.completions.create(model="m", messages=HELLO, max_tokens=5)  # nothing to count
    ready = httpx.get(gw.root + "/readyz", timeout=5)
    assert ready.status_code == 503
    limits = ready.json()["limits"]
    assert limits["state"] == "refusing" and limits["on_store_failure"] == "closed" and "redis" in limits["reason"]


def test_limits_bind_the_messages_route_too(start: Callable[..., GatewayServer]) -> None:
    """/v1/messages runs the same stage: the key's rpm counts its requests, and the refusal is
    Anthropic's 429 rate_limit_error with the same headers."""
    import httpx

    gw = start(settings({"backend": "memory"}))
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": KEYS["rpm"], "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=gw.root, timeout=10) as http:
        for _ in range(10):
            ok = http.post("/v1/messages", json=body, headers=headers)
            assert ok.status_code == 200, ok.text
        refused = http.post("/v1/messages", json=body, headers=headers)
    assert refused.status_code == 429
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["x-ratelimit-limit-requests"] == "10" and int(refused.headers["retry-after"]) >= 1


def test_limits_bind_the_responses_route_too(start: Callable[..., GatewayServer]) -> None:
    """/v1/responses (over the chat pipeline) runs the same stage: the key's rpm counts its
    requests, and the refusal is the OpenAI SDK's RateLimitError with the rate headers."""
    gw = start(settings({"backend": "memory"}))
    with client(gw, "rpm") as c:
        for _ in range(10):
            c.responses.create(model="m", input="hi", max_output_tokens=16, store=False)
        with pytest.raises(openai.RateLimitError) as refused:
            c.responses.create(model="m", input="hi", max_output_tokens=16, store=False)
    exc = refused.value
    assert exc.status_code == 429 and exc.code == "rate_limit_exceeded"
    assert exc.response.headers["x-ratelimit-limit-requests"] == "10" and int(exc.response.headers["retry-after"]) >= 1


def test_a_completions_prompt_array_and_best_of_count_in_the_worst_case(start: Callable[..., GatewayServer]) -> None:
    """3 prompts x best_of 4 x max_tokens 1000 may generate 12,000 tokens ($1.20): more than the
    $1.00 budget, so refused before dispatch, not admitted as one completion's $0.10."""
    gw = start(settings({"backend": "memory"}))
    with client(gw, "budget") as c, pytest.raises(openai.RateLimitError) as refused:
        c.completions.create(model="m", prompt=["a", "b", "c"], best_of=4, max_tokens=1000)
    assert refused.value.code == "insufficient_quota" and "$1.2000" in refused.value.message
    with client(gw, "budget") as c, pytest.raises(openai.RateLimitError):
        c.completions.create(model="m", prompt=[[1, 2], [3], [4]], n=4, max_tokens=1000)  # token arrays too
    with client(gw, "free") as c, pytest.raises(openai.BadRequestError) as bad:
        c.completions.create(model="m", prompt=["a"] * 129, max_tokens=5)  # server.max_completion_prompts: 128
    assert bad.value.status_code == 400 and bad.value.param == "prompt"


def test_an_expired_key_is_refused_on_every_route_not_only_inference(start: Callable[..., GatewayServer]) -> None:
    """Expiry lived in the limits stage alone: an expired key could still list models, read and
    delete stored responses and count tokens. Now the authenticator refuses it: 401 expired_api_key."""
    import httpx

    gw = start(settings({"backend": "memory"}))
    with client(gw, "old") as old:
        with pytest.raises(openai.AuthenticationError) as listed:
            old.models.list()
        assert listed.value.code == "expired_api_key"
        for call in (lambda: old.responses.retrieve("resp_nope"), lambda: old.responses.delete("resp_nope"),
                     lambda: old.responses.input_items.list("resp_nope"), lambda: old.responses.cancel("resp_nope")):
            with pytest.raises(openai.AuthenticationError) as refused:
                call()
            assert refused.value.status_code == 401 and refused.value.code == "expired_api_key"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gw.root, timeout=10) as http:
        counted = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": KEYS["old"]})
        assert counted.status_code == 401 and counted.json()["error"]["type"] == "authentication_error"
        assert "expired" in counted.json()["error"]["message"]
        # A key that has not expired still works on them.
        assert http.get("/v1/models", headers={"authorization": f"Bearer {KEYS['free']}"}).status_code == 200


def test_count_tokens_honours_the_keys_allowed_models_and_rpm(start: Callable[..., GatewayServer]) -> None:
    import httpx

    gw = start(settings({"backend": "memory"}))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gw.root, timeout=10) as http:
        denied = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": KEYS["narrow"]})
        assert denied.status_code == 403 and denied.json()["error"]["type"] == "permission_error"
        for _ in range(10):
            ok = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": KEYS["rpm"]})
            assert ok.status_code == 200 and ok.json()["input_tokens"] > 0
        refused = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": KEYS["rpm"]})
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["x-ratelimit-limit-requests"] == "10" and int(refused.headers["retry-after"]) >= 1


def _seconds(duration: str) -> float:
    found = re.fullmatch(r"(?:(\d+)m)?(\d+)s|(\d+)ms", duration)
    assert found is not None, duration
    minutes, seconds, ms = found.groups()
    return int(ms) / 1000 if ms else int(minutes or 0) * 60 + int(seconds)


def test_every_answer_carries_the_rate_limit_headers(start: Callable[..., GatewayServer]) -> None:
    """As OpenAI sends them on each answer, not only on a 429: chat (plain and streamed),
    completions, embeddings, responses and messages, each counted once. The team's rpm (50) is
    the tighter request limit, the key's tpm the only token limit; a key without limits gets none."""
    import anthropic

    gw = start(settings({"backend": "memory"}))
    c = client(gw, "rated")
    calls = [
        lambda: c.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5),
        lambda: c.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5, stream=True),
        lambda: c.completions.with_raw_response.create(model="m", prompt="hi", max_tokens=5),
        lambda: c.embeddings.with_raw_response.create(model="e", input="hi"),
        lambda: c.responses.with_raw_response.create(model="m", input="hi", max_output_tokens=16, store=False),
    ]
    seen = []
    for call in calls:
        raw = call()
        seen.append(raw.headers)
        if "stream" in raw.headers.get("content-type", ""):
            assert list(raw.parse())  # the stream's own headers carry them, before its first event
        else:
            raw.parse()
    with anthropic.Anthropic(base_url=gw.root, api_key=KEYS["rated"], max_retries=0) as a:
        seen.append(a.messages.with_raw_response.create(model="m", max_tokens=5, messages=HELLO).headers)
    remaining = [int(h["x-ratelimit-remaining-requests"]) for h in seen]
    assert remaining == [49, 48, 47, 46, 45, 44]
    assert {h["x-ratelimit-limit-requests"] for h in seen} == {"50"}
    assert {h["x-ratelimit-limit-tokens"] for h in seen} == {"100000"}
    tokens = [int(h["x-ratelimit-remaining-tokens"]) for h in seen]
    assert all(0 < t < 100_000 for t in tokens) and tokens == sorted(tokens, reverse=True) and len(set(tokens)) == 6
    for h in seen:  # the 60 s window drains what it holds within the window, to one bucket (5 s)
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
            assert 55 <= _seconds(h[name]) <= 60, h[name]
    with client(gw, "free") as free:
        plain = free.chat.completions.with_raw_response.create(model="m", messages=HELLO, max_tokens=5)
    assert not [name for name in plain.headers if name.startswith("x-ratelimit-")]
    c.close()
