"""Dispatch over `MockHTTPClient`: retry, fallback, Retry-After, caps, breaker feedback, stream commit."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.outcome import Completed, Streaming
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.breaker_feedback import BreakerFeedback
from gateway.routing.order import Ordering
from gateway.routing.settings import BreakerConfig, RetryConfig
from kernel.errors import (
    AllAttemptsFailed,
    ProviderConnectError,
    ProviderRejected,
    ProviderStreamError,
    ProviderTimeout,
    Unavailable,
)
from providers.base import UpstreamRequest
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock

RETRY = RetryConfig(attempts_per_endpoint=2, max_attempts=6, backoff_base=0.1, backoff_max=1.0, max_retry_after=5.0)
TIMEOUTS = Timeouts(connect=1, first_byte=0.05, between_chunks=1, total=5)
A = make_endpoint("a/m", base_url="http://a.test/v1", upstream_model="up-a")
B = make_endpoint("b/m", base_url="http://b.test/v1", upstream_model="up-b")
C = make_endpoint("c/m", base_url="http://c.test/v1", upstream_model="up-c")

OK_BODY = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream-name",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 1,
            "total_tokens": 6,
            "prompt_tokens_details": {"cached_tokens": 2},
        },
    }
)


def ok() -> MockResponse:
    return MockResponse(200, {"content-type": "application/json"}, OK_BODY)


def error(status: int, headers: dict[str, str] | None = None) -> MockResponse:
    return MockResponse(
        status, headers or {}, orjson.dumps({"error": {"message": f"upstream says {status}", "type": "x"}})
    )


def sse(*events: dict[str, Any] | str | BaseException) -> MockResponse:
    chunks: list[bytes | BaseException] = []
    for event in events:
        if isinstance(event, BaseException):
            chunks.append(event)
        else:
            data = event if isinstance(event, str) else orjson.dumps(event).decode()
            chunks.append(f"data: {data}\n\n".encode())
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)


def chunk(content: str, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "up",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }


Script = dict[str, list[MockResponse | BaseException | Callable[[], MockResponse]]]


class Upstreams:
    """Per-host scripted answers; the last answer repeats."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: UpstreamRequest) -> MockResponse:
        host = request.url.split("/")[2].split(".")[0]
        self.seen.append((host, orjson.loads(request.body)))
        answers = self.script[host]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer() if callable(answer) else answer

    def hosts(self) -> list[str]:
        return [host for host, _ in self.seen]


def setup(
    script: Script, retry: RetryConfig = RETRY, breaker: CircuitBreaker | None = None
) -> tuple[Dispatcher, Upstreams, CircuitBreaker, FakeClock]:
    upstreams = Upstreams(script)
    clock = FakeClock()
    breaker = breaker or CircuitBreaker(BreakerConfig(min_requests=100))
    dispatcher = Dispatcher(
        MockHTTPClient(upstreams), retry, TIMEOUTS, clock=clock, rng=random.Random(42), sleep=clock.sleep,
        observer=BreakerFeedback(breaker),
    )
    return dispatcher, upstreams, breaker, clock


def context(stream: bool = False, **body: Any) -> RequestContext:
    ctx = RequestContext(request_id="req_test", op="chat", started=1000.0)
    ctx.body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **body}
    ctx.model, ctx.stream = "m", stream
    return ctx


async def test_first_try() -> None:
    dispatcher, upstreams, breaker, clock = setup({"a": [ok()], "b": [ok()]})
    ctx = context()

    result = await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert isinstance(result, Completed)
    assert orjson.loads(result.body)["model"] == "m"  # the public name, not the upstream's
    assert (ctx.attempts, ctx.endpoint_id) == (1, "a/m")
    assert ctx.usage is not None and (ctx.usage.prompt_tokens, ctx.usage.cached_tokens) == (5, 2)
    assert upstreams.seen == [("a", {**ctx.body, "model": "up-a"})]
    assert clock.sleeps == []


async def test_retry_then_fallback() -> None:
    dispatcher, upstreams, breaker, clock = setup({"a": [error(500)], "b": [ok()]})
    ctx = context()

    result = await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert isinstance(result, Completed)
    assert upstreams.hosts() == ["a", "a", "b"]
    assert (ctx.attempts, ctx.endpoint_id) == (3, "b/m")
    (delay,) = clock.sleeps  # one backoff between A's two attempts, none before switching to B
    assert RETRY.backoff_base / 2 <= delay <= RETRY.backoff_base
    assert ctx.waited >= delay


@pytest.mark.parametrize(
    "failure",
    [
        lambda: error(502),
        lambda: error(503),
        lambda: error(429),
        lambda: error(408),
        lambda: MockResponse(200, {}, b"<html>not json"),
        lambda: ProviderConnectError("connection reset", endpoint="a/m"),
        lambda: ProviderTimeout("no first byte", endpoint="a/m"),
    ],
    ids=["502", "503", "429", "408", "invalid-json", "reset", "timeout"],
)
async def test_retryable_failures_are_retried(failure: Callable[[], Any]) -> None:
    dispatcher, upstreams, _, clock = setup({"a": [failure(), ok()]})
    ctx = context()

    assert isinstance(await dispatcher.dispatch(ctx, Ordering((A,))), Completed)
    assert upstreams.hosts() == ["a", "a"]
    assert len(clock.sleeps) == 1


@pytest.mark.parametrize("status", [400, 413, 422])
async def test_client_error_is_passed_through_without_fallback(status: int) -> None:
    dispatcher, upstreams, breaker, _ = setup({"a": [error(status)], "b": [ok()]})
    ctx = context()

    with pytest.raises(ProviderRejected) as info:
        await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert info.value.status_code == status
    assert info.value.message == f"upstream says {status}"
    assert upstreams.hosts() == ["a"]
    assert ctx.attempts == 1
    # The request's fault, not the endpoint's: nothing counts against it.
    assert breaker.snapshot(0).get("a/m", {"window_failures": 0})["window_failures"] == 0


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_endpoint_misconfiguration_moves_on_without_retry(status: int) -> None:
    dispatcher, upstreams, breaker, clock = setup({"a": [error(status)], "b": [ok()]})
    ctx = context()

    assert isinstance(await dispatcher.dispatch(ctx, Ordering((A, B))), Completed)
    assert upstreams.hosts() == ["a", "b"]
    assert clock.sleeps == []


async def test_retry_after_is_waited() -> None:
    dispatcher, upstreams, breaker, clock = setup({"a": [error(429, {"retry-after": "3"}), ok()]})
    ctx = context()

    assert isinstance(await dispatcher.dispatch(ctx, Ordering((A,))), Completed)
    assert clock.sleeps == [3.0]
    assert upstreams.hosts() == ["a", "a"]


async def test_retry_after_longer_than_the_limit_skips_to_the_next_candidate() -> None:
    dispatcher, upstreams, breaker, clock = setup({"a": [error(429, {"retry-after": "30"})], "b": [ok()]})
    ctx = context()
    start = clock()

    result = await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert isinstance(result, Completed)
    assert upstreams.hosts() == ["a", "b"]
    assert clock.sleeps == []
    assert breaker.blocked_until("a/m") == pytest.approx(start + 30)


@pytest.mark.parametrize("value", ["1e306", "1.8e305", "99999999999"])
async def test_a_huge_retry_after_is_clamped_to_the_block_limit(value: str) -> None:
    retry = RETRY.model_copy(update={"max_retry_after_block": 300.0})
    dispatcher, upstreams, breaker, clock = setup({"a": [error(429, {"retry-after": value})]}, retry=retry)
    start = clock()

    with pytest.raises(AllAttemptsFailed) as info:
        await dispatcher.dispatch(context(), Ordering((A,)))

    # A 429 with a header the client can use, not a 500; the endpoint blocked for 300 s, not for good.
    assert info.value.status_code == 429 and info.value.headers == {"retry-after": "300"}
    assert breaker.blocked_until("a/m") == pytest.approx(start + 300)
    assert clock.sleeps == []


async def test_a_non_finite_retry_after_from_an_adapter_is_ignored() -> None:
    dispatcher, upstreams, breaker, clock = setup(
        {"a": [ProviderConnectError("down", endpoint="a/m", retry_after=float("inf"))], "b": [ok()]}
    )
    assert isinstance(await dispatcher.dispatch(context(), Ordering((A, B))), Completed)
    assert breaker.blocked_until("a/m") == 0.0


async def test_max_attempts_caps_the_whole_request() -> None:
    retry = RETRY.model_copy(update={"attempts_per_endpoint": 3, "max_attempts": 4})
    dispatcher, upstreams, _, _ = setup({"a": [error(500)], "b": [error(500)], "c": [ok()]}, retry=retry)
    ctx = context()

    with pytest.raises(AllAttemptsFailed) as info:
        await dispatcher.dispatch(ctx, Ordering((A, B, C)))

    assert upstreams.hosts() == ["a", "a", "a", "b"]
    assert info.value.attempts == 4 and ctx.attempts == 4
    assert "All 4 attempts" in info.value.message


async def test_all_failed_takes_the_last_errors_status() -> None:
    dispatcher, upstreams, _, _ = setup({"a": [error(500)], "b": [error(429, {"retry-after": "2"})]})
    ctx = context()

    with pytest.raises(AllAttemptsFailed) as info:
        await dispatcher.dispatch(ctx, Ordering((A, B)))

    err = info.value
    assert (err.status_code, err.error_type, err.code) == (429, "rate_limit_error", "upstream_rate_limited")
    assert err.headers == {"retry-after": "2"}
    assert err.last is not None and err.last.endpoint == "b/m"
    assert upstreams.hosts() == ["a", "a", "b", "b"]


async def test_all_failed_with_timeouts_is_504() -> None:
    dispatcher, _, _, _ = setup({"a": [ProviderTimeout("slow", endpoint="a/m")]})
    with pytest.raises(AllAttemptsFailed) as info:
        await dispatcher.dispatch(context(), Ordering((A,)))
    assert info.value.status_code == 504


async def test_breaker_records_failures_and_successes() -> None:
    dispatcher, _, breaker, clock = setup({"a": [error(500)], "b": [ok()]})
    await dispatcher.dispatch(context(), Ordering((A, B)))
    snap = breaker.snapshot(clock())
    assert (snap["a/m"]["window_requests"], snap["a/m"]["window_failures"]) == (2, 2)
    assert (snap["b/m"]["window_requests"], snap["b/m"]["window_failures"]) == (1, 0)


async def test_breaker_trips_and_half_open_trial_is_taken() -> None:
    breaker = CircuitBreaker(BreakerConfig(min_requests=2, failure_rate=0.5, open_seconds=10))
    dispatcher, _, breaker, clock = setup({"a": [error(500)], "b": [ok()]}, breaker=breaker)
    await dispatcher.dispatch(context(), Ordering((A, B)))
    assert breaker.state("a/m", clock()) == "open"

    clock.advance(10)
    assert breaker.allows("a/m", clock())
    await dispatcher.dispatch(context(), Ordering((A, B)))  # the trial fails: open again
    assert breaker.state("a/m", clock()) == "open"


async def test_no_endpoint_is_unavailable() -> None:
    dispatcher, upstreams, _, _ = setup({})
    with pytest.raises(Unavailable) as info:
        await dispatcher.dispatch(context(), Ordering(()))
    assert info.value.status_code == 503 and info.value.headers == {"retry-after": "1"}
    assert upstreams.seen == []


async def test_fail_open_is_noted_on_the_context() -> None:
    dispatcher, _, _, _ = setup({"a": [ok()]})
    ctx = context()
    await dispatcher.dispatch(ctx, Ordering((A,), fail_open="circuit_open"))
    assert ctx.fail_open == "circuit_open"


# -- streaming: commit on the first event ------------------------------------------------------


async def drain(rest: AsyncIterator[Any]) -> list[bytes]:
    out: list[bytes] = []
    async for parsed in rest:
        out.extend(parsed.payloads)
    return out


async def test_stream_commits_on_the_first_event() -> None:
    dispatcher, upstreams, _, _ = setup({"a": [sse(chunk("a"), chunk("b", "stop"), "[DONE]")]})
    ctx = context(stream=True)

    result = await dispatcher.dispatch(ctx, Ordering((A,)))

    assert isinstance(result, Streaming)
    assert result.endpoint is A and not result.done
    assert [orjson.loads(p)["choices"][0]["delta"]["content"] for p in result.first] == ["a"]
    assert [orjson.loads(p)["choices"][0]["delta"]["content"] for p in await drain(result.rest)] == ["b"]
    assert ctx.ttft is not None
    assert upstreams.seen[0][1]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "broken",
    [
        lambda: sse('{"error": {"message": "overloaded"}}'),
        lambda: sse("{not json"),
        lambda: MockResponse(200, {}, chunks=[]),
        lambda: sse(ProviderStreamError("reset before any event", endpoint="a/m")),
    ],
    ids=["error-event", "invalid-json", "empty", "broken"],
)
async def test_stream_failing_before_the_first_event_falls_back(broken: Callable[[], MockResponse]) -> None:
    first = broken()
    dispatcher, upstreams, _, _ = setup({"a": [first, broken()], "b": [sse(chunk("ok", "stop"), "[DONE]")]})
    ctx = context(stream=True)

    result = await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert isinstance(result, Streaming) and result.endpoint is B
    assert upstreams.hosts() == ["a", "a", "b"]
    assert first.closed  # the abandoned upstream response was released


async def test_stream_with_usage_only_before_done() -> None:
    usage = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "up",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 0},
    }
    dispatcher, _, _, _ = setup({"a": [sse(usage, "[DONE]")]})
    ctx = context(stream=True)

    result = await dispatcher.dispatch(ctx, Ordering((A,)))

    assert isinstance(result, Streaming)
    assert result.done and result.first == []  # the usage chunk is stripped: the client did not ask
    assert ctx.usage is not None and ctx.usage.prompt_tokens == 3


class SlowStream(MockResponse):
    async def chunks_iter(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(1.0)
        yield b"data: [DONE]\n\n"


async def test_first_event_timeout_falls_back() -> None:
    slow = SlowStream(200, {})
    dispatcher, upstreams, _, _ = setup(
        {"a": [slow], "b": [sse(chunk("ok", "stop"), "[DONE]")]},
        retry=RETRY.model_copy(update={"attempts_per_endpoint": 1}),
    )
    ctx = context(stream=True)

    result = await dispatcher.dispatch(ctx, Ordering((A, B)))

    assert isinstance(result, Streaming) and result.endpoint is B
    assert slow.closed
    assert upstreams.hosts() == ["a", "b"]


async def test_the_attempts_trace_headers_go_upstream_only_when_tracing_set_them() -> None:
    client = MockHTTPClient(lambda request: ok())
    dispatcher = Dispatcher(client, RETRY, TIMEOUTS, clock=FakeClock(), rng=random.Random(1))
    adapter_headers = A.adapter.build_request(A.target, "chat", context().body_for(A.id), False).headers

    await dispatcher.dispatch(context(), Ordering((A,)))
    traced = context()
    traced.spans = SimpleNamespace(upstream_headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    await dispatcher.dispatch(traced, Ordering((A,)))

    plain, with_trace = (dict(r.headers) for r in client.requests)
    assert plain == dict(adapter_headers) and "traceparent" not in plain
    assert with_trace == {**adapter_headers, "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
