"""The tracing observer over the real dispatcher, accountant and stream relay (upstreams scripted
on `MockHTTPClient`): span names, attributes, parents, retries, streams, errors, sampling, and the
traceparent each upstream request carries."""

from __future__ import annotations

import random
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from gateway.pipeline.account import Accountant
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.observe import Observers
from gateway.pipeline.outcome import Completed, Streaming
from gateway.pipeline.stream import relay
from gateway.routing.order import Ordering
from gateway.routing.settings import RetryConfig
from gateway.tracing.settings import TracingConfig
from kernel.deployment import Price
from kernel.errors import ProviderError, ProviderStreamError, RateLimited
from kernel.records import RequestRecord
from providers.base import UpstreamRequest
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock
from tests.gateway.tracing.helpers import (
    CLIENT_SPAN,
    TRACE_ID,
    TRACEPARENT,
    finished,
    in_memory,
    of_kind,
    parts,
    span_id,
    trace_id,
)

RETRY = RetryConfig(attempts_per_endpoint=2, max_attempts=6, backoff_base=0.1, backoff_max=1.0, max_retry_after=5.0)
TIMEOUTS = Timeouts(connect=1, first_byte=1, between_chunks=1, total=5)
A = make_endpoint("a/m", base_url="http://a.test:8443/v1", upstream_model="up-a")
B = make_endpoint("b/m", base_url="http://b.test/v1", upstream_model="up-b")
SAMPLED = 0x01  # the traceparent flag (the SDK also sets 0x02, "random", of Trace Context level 2)
USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 2}}


def ok(request: UpstreamRequest) -> MockResponse:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream-name",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": USAGE,
    }
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(body))


def server_error(request: UpstreamRequest) -> MockResponse:
    return MockResponse(500, {}, orjson.dumps({"error": {"message": "upstream says 500", "type": "x"}}))


def chunk(content: str, **extra: Any) -> bytes:
    event = {"id": "c", "object": "chat.completion.chunk", "model": "up", "choices": [], **extra}
    if content:
        event["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    return b"data: " + orjson.dumps(event) + b"\n\n"


def streamed(request: UpstreamRequest) -> MockResponse:
    chunks = [chunk("he"), chunk("llo"), chunk("", usage=USAGE), b"data: [DONE]\n\n"]
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)


def cut(request: UpstreamRequest) -> MockResponse:
    return MockResponse(
        200,
        {"content-type": "text/event-stream"},
        chunks=[chunk("he"), ProviderStreamError("connection reset", endpoint="a/m")],
    )


class Upstreams:
    """Per-host answers (the last repeats), each request kept."""

    def __init__(self, **script: list[Any]) -> None:
        self.script = script
        self.requests: list[UpstreamRequest] = []

    def __call__(self, request: UpstreamRequest) -> MockResponse:
        self.requests.append(request)
        answers = self.script[request.url.split("/")[2].split(".")[0]]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer(request)  # type: ignore[no-any-return]


class Gateway:
    """The request path's stages that tell the observers, with tracing among them."""

    def __init__(self, upstreams: Upstreams, **cfg: Any) -> None:
        self.clock = FakeClock()
        self.tracing, self.exporter = in_memory(self.clock, **cfg)
        self.observers = Observers([self.tracing.observer])
        self.upstreams = upstreams
        self.dispatcher = Dispatcher(
            MockHTTPClient(upstreams),
            RETRY,
            TIMEOUTS,
            clock=self.clock,
            rng=random.Random(1),
            sleep=self.clock.sleep,
            observer=self.observers,
        )
        self.accountant = Accountant({"a/m": Price(input=1.0), "b/m": Price(input=2.0)}.get, self.clock, self.observers)

    def context(self, *, stream: bool = False, traceparent: str | None = TRACEPARENT) -> RequestContext:
        ctx = RequestContext(request_id="req_t", op="chat", started=self.clock())
        ctx.body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, "max_tokens": 9}
        ctx.model, ctx.stream, ctx.traceparent = "m", stream, traceparent
        return ctx

    async def complete(self, ctx: RequestContext, *endpoints: Any) -> RequestRecord:
        result = await self.dispatcher.dispatch(ctx, Ordering(endpoints or (A, B)))
        assert isinstance(result, Completed)
        return self.accountant.record(ctx)

    def spans(self) -> list[ReadableSpan]:
        return finished(self.tracing, self.exporter)

    def sent_traceparents(self) -> list[str]:
        return [r.headers["traceparent"] for r in self.upstreams.requests]


async def drain(gw: Gateway, ctx: RequestContext, result: Streaming) -> list[bytes]:
    def on_failure(exc: ProviderError) -> None:
        gw.observers.attempt_failed(ctx, result.endpoint, gw.clock(), exc)

    stream = relay(ctx, result, error_event=lambda exc: b"error", on_failure=on_failure, on_finish=gw.accountant.record)
    return [piece async for piece in stream]


async def test_a_request_span_with_one_attempt_span_under_the_clients_trace() -> None:
    gw = Gateway(Upstreams(a=[ok]))
    ctx = gw.context()
    gw.clock.advance(0.002)  # routing and admission

    record = await gw.complete(ctx)

    spans = gw.spans()
    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert len(spans) == 2 and record.cost_usd > 0
    assert server.name == "chat m"
    assert (trace_id(server), f"{server.parent.span_id:016x}") == (TRACE_ID, CLIENT_SPAN)  # type: ignore[union-attr]
    assert server.attributes is not None
    assert dict(server.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.request.max_tokens": 9,
        "gen_ai.response.model": "up-a",
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.usage.cache_read.input_tokens": 2,
        "gateway.request_id": "req_t",
        "gateway.stream": False,
        "gateway.attempts": 1,
        "gateway.route.endpoint": "a/m",
        "gateway.cache.hit": True,
        "gateway.cost_usd": record.cost_usd,
        "http.response.status_code": 200,
    }
    assert client.name == "chat up-a"
    assert client.parent is not None and client.parent.span_id == server.context.span_id
    assert client.attributes is not None
    assert {
        k: client.attributes[k] for k in ("gateway.endpoint", "gateway.attempt", "server.address", "server.port")
    } == {
        "gateway.endpoint": "a/m",
        "gateway.attempt": 1,
        "server.address": "a.test",
        "server.port": 8443,
    }
    assert client.attributes["gen_ai.usage.output_tokens"] == 3
    assert client.status.status_code == StatusCode.OK
    # The spans nest in time: the request's from its arrival, the attempt's from its send.
    assert server.start_time is not None and client.start_time is not None
    assert server.start_time < client.start_time <= client.end_time <= server.end_time  # type: ignore[operator]
    # The upstream request carried the attempt span's context: the client's trace, the attempt as parent.
    assert gw.sent_traceparents() == [f"00-{TRACE_ID}-{span_id(client)}-01"]


async def test_retries_and_a_fallback_are_one_attempt_span_each() -> None:
    gw = Gateway(Upstreams(a=[server_error], b=[ok]))
    ctx = gw.context()

    await gw.complete(ctx)

    spans = gw.spans()
    [server], clients = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert [(c.name, c.attributes["gateway.attempt"]) for c in clients] == [  # type: ignore[index]
        ("chat up-a", 1),
        ("chat up-a", 2),
        ("chat up-b", 3),
    ]
    for failed in clients[:2]:
        assert failed.status.status_code == StatusCode.ERROR
        assert failed.attributes is not None
        assert failed.attributes["error.type"] == "ProviderServerError"
        assert failed.attributes["http.response.status_code"] == 500
        assert "upstream says" not in (failed.status.description or "")  # the upstream's detail stays out
    assert clients[2].status.status_code == StatusCode.OK
    assert all(c.parent is not None and c.parent.span_id == server.context.span_id for c in clients)
    assert server.attributes is not None
    assert (server.attributes["gateway.attempts"], server.attributes["gateway.route.endpoint"]) == (3, "b/m")
    assert server.attributes["gen_ai.response.model"] == "up-b"
    assert server.status.status_code == StatusCode.UNSET
    # Each attempt's request named its own span as the parent.
    assert [parts(tp)[:2] for tp in gw.sent_traceparents()] == [(TRACE_ID, span_id(c)) for c in clients]


async def test_a_stream_span_ends_with_the_stream_not_with_its_first_event() -> None:
    gw = Gateway(Upstreams(a=[streamed]))
    ctx = gw.context(stream=True)

    result = await gw.dispatcher.dispatch(ctx, Ordering((A,)))

    assert isinstance(result, Streaming) and ctx.committed
    assert gw.spans() == []  # committed, headers could go out: both spans still open
    gw.clock.advance(0.5)
    body = b"".join(await drain(gw, ctx, result))
    assert body.endswith(b"data: [DONE]\n\n")
    spans = gw.spans()
    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    for span in (server, client):  # the usage came with the last event
        assert span.attributes is not None
        assert (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"]) == (5, 3)
        assert span.status.status_code != StatusCode.ERROR
    assert server.attributes is not None and server.attributes["gateway.stream"] is True
    assert server.attributes["gateway.ttft_s"] == ctx.ttft


async def test_a_stream_cut_after_commit_fails_its_attempt_span_and_the_request_span() -> None:
    gw = Gateway(Upstreams(a=[cut]))
    ctx = gw.context(stream=True)

    result = await gw.dispatcher.dispatch(ctx, Ordering((A,)))
    assert isinstance(result, Streaming)
    await drain(gw, ctx, result)

    spans = gw.spans()
    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert client.status.status_code == StatusCode.ERROR
    assert client.attributes is not None and client.attributes["error.type"] == ProviderStreamError.__name__
    assert server.status.status_code == StatusCode.ERROR
    assert server.attributes is not None
    assert (server.attributes["http.response.status_code"], server.attributes["error.type"]) == (
        502,
        ProviderStreamError.__name__,
    )


async def test_a_request_refused_before_dispatch_is_one_span_with_its_error() -> None:
    gw = Gateway(Upstreams(a=[ok]))
    ctx = gw.context()
    exc = RateLimited("Rate limit reached.")
    ctx.status, ctx.error = exc.status_code, type(exc).__name__

    gw.accountant.record(ctx)

    [span] = gw.spans()
    assert (span.kind, span.name, trace_id(span)) == (SpanKind.SERVER, "chat m", TRACE_ID)
    assert span.attributes is not None
    assert (span.attributes["error.type"], span.attributes["http.response.status_code"]) == ("RateLimited", 429)
    assert span.attributes["gateway.attempts"] == 0
    assert "gen_ai.provider.name" not in span.attributes
    assert span.status.status_code == StatusCode.UNSET  # a 4xx is the client's: not a server span's error
    assert gw.upstreams.requests == []


async def test_a_malformed_or_absent_traceparent_starts_a_new_trace() -> None:
    for incoming in ("00-zz-not-a-traceparent", f"00-{'0' * 32}-{CLIENT_SPAN}-01", None):
        gw = Gateway(Upstreams(a=[ok]))

        await gw.complete(gw.context(traceparent=incoming))

        [server] = of_kind(gw.spans(), SpanKind.SERVER)
        assert server.parent is None
        assert trace_id(server) not in (TRACE_ID, "0" * 32)
        assert parts(gw.sent_traceparents()[0])[0] == trace_id(server)


async def test_an_untrusted_incoming_traceparent_is_ignored() -> None:
    gw = Gateway(Upstreams(a=[ok]), trust_incoming=False)

    await gw.complete(gw.context())

    [server] = of_kind(gw.spans(), SpanKind.SERVER)
    assert server.parent is None and trace_id(server) != TRACE_ID


async def test_by_default_a_client_cannot_hide_its_requests_from_traces() -> None:
    # trust_incoming is off by default: a client's "not sampled" flag (-00) decides nothing.
    exporter_cfg = TracingConfig().model_dump()
    gw = Gateway(Upstreams(a=[ok]), trust_incoming=exporter_cfg["trust_incoming"])

    await gw.complete(gw.context(traceparent=f"00-{TRACE_ID}-{CLIENT_SPAN}-00"))

    [server] = of_kind(gw.spans(), SpanKind.SERVER)
    assert server.parent is None and trace_id(server) != TRACE_ID


async def test_sampled_out_traces_record_nothing_and_still_propagate() -> None:
    gw = Gateway(Upstreams(a=[ok]), sample_ratio=0.0)

    await gw.complete(gw.context(traceparent=None))
    await gw.complete(gw.context(traceparent=f"00-{TRACE_ID}-{CLIENT_SPAN}-00"))  # the client did not sample

    assert gw.spans() == []
    [own, clients] = [parts(tp) for tp in gw.sent_traceparents()]
    assert not int(own[2], 16) & SAMPLED and own[0] != "0" * 32
    assert clients[0] == TRACE_ID and not int(clients[2], 16) & SAMPLED


async def test_a_sampled_client_trace_is_recorded_whatever_the_ratio() -> None:
    gw = Gateway(Upstreams(a=[ok]), sample_ratio=0.0)

    await gw.complete(gw.context())

    assert {trace_id(s) for s in gw.spans()} == {TRACE_ID}
    assert len(gw.spans()) == 2


async def test_a_probe_request_gets_a_trace_of_its_own_sampled_like_a_users() -> None:
    # Probes go upstream without the pipeline: without these headers, tracing on told them apart.
    endpoint = make_endpoint("a", "m")
    for ratio, recorded in ((1.0, True), (0.0, False)):
        tracing, exporter = in_memory(FakeClock(), sample_ratio=ratio)
        headers = [tracing.observer.probe_headers("chat", endpoint)["traceparent"] for _ in range(2)]
        [first, second] = [parts(tp) for tp in headers]
        assert first[0] != second[0] and "0" * 32 not in (first[0], second[0])  # new traces
        assert bool(int(first[2], 16) & SAMPLED) is recorded
        spans = finished(tracing, exporter)
        assert len(spans) == (2 if recorded else 0)
        for span in spans:
            assert span.kind == SpanKind.CLIENT and span.attributes is not None
            assert span.attributes["gateway.probe"] is True and span.attributes["gateway.endpoint"] == endpoint.id
            assert span.name == "chat m" and span.parent is None
