"""Tracing through the assembled gateway over real sockets: the official SDKs as clients, the fake
OpenAI-compatible upstream (which keeps the headers it received), spans in the SDK's in-memory
exporter (the lifespan's close exports them) or at a fake OTLP collector; and with tracing off,
no tracing observer, no OpenTelemetry import and no traceparent sent."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.runtime import build_state
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.openai_upstream import FakeOpenAIUpstream, Received
from tests.fakes.otlp_collector import FakeOTLPCollector, attributes
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.tracing.helpers import CLIENT_SPAN, TRACE_ID, TRACEPARENT, of_kind, parts, span_id, trace_id

KEY = "sk-gw-tracing-key-0001"
HELLO = [{"role": "user", "content": "hi"}]
TRACED = {"traceparent": TRACEPARENT}
SLOW_EVENT_S = 5.0  # between a slow upstream's events


def settings_for(upstream: FakeOpenAIUpstream, **tracing: Any) -> Settings:
    return load_config(
        environ={},
        auth={"keys": [{"name": "tracer", "key": KEY}]},
        retry={"attempts_per_endpoint": 2, "max_attempts": 6, "backoff_base": 0.01, "backoff_max": 0.05},
        breaker={"min_requests": 1000},
        providers=[
            {"name": "fake-a", "kind": "openai", "base_url": upstream.url},
            {"name": "fake-b", "kind": "openai", "base_url": upstream.url},
        ],
        deployments=[
            {"model": "chat-model", "provider": "fake-a", "upstream_model": "gpt-fake"},
            {"model": "fallback-500", "provider": "fake-a", "upstream_model": "a@status:500"},
            {"model": "fallback-500", "provider": "fake-b", "upstream_model": "b-ok"},
            {"model": "cut-stream", "provider": "fake-a", "upstream_model": "cut@cut:2"},
        ],
        tracing={"trust_incoming": True, **tracing},
    )


@pytest.fixture(scope="module")
def servers() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop().start()
    yield loop
    loop.stop()


@pytest.fixture(scope="module")
def upstream_server(servers: BackgroundLoop) -> Iterator[FakeOpenAIUpstream]:
    upstream = servers.call(FakeOpenAIUpstream().start())
    yield upstream
    servers.call(upstream.stop())


@pytest.fixture
def upstream(upstream_server: FakeOpenAIUpstream) -> FakeOpenAIUpstream:
    upstream_server.reset()
    return upstream_server


class Traced:
    """A gateway with tracing on for one test; `spans` once it has stopped (its close exported them)."""

    def __init__(self, servers: BackgroundLoop, settings: Settings) -> None:
        self.exporter = InMemorySpanExporter()
        self.server = GatewayServer(create_app(settings, span_exporter=self.exporter), servers).start()
        self.openai = openai.OpenAI(base_url=self.server.url, api_key=KEY, max_retries=0, timeout=10)
        self.stopped = False

    def stop(self) -> list[ReadableSpan]:
        if not self.stopped:
            self.stopped = True
            self.openai.close()
            self.server.stop()
        return list(self.exporter.get_finished_spans())


@contextmanager
def traced(servers: BackgroundLoop, settings: Settings) -> Iterator[Traced]:
    gateway = Traced(servers, settings)
    try:
        yield gateway
    finally:
        gateway.stop()


def sent_traceparent(received: Received) -> str | None:
    return {k.lower(): v for k, v in received.headers.items()}.get("traceparent")


def test_a_chat_request_continues_the_clients_trace_to_the_upstream(
    servers: BackgroundLoop, upstream: FakeOpenAIUpstream
) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        resp = gw.openai.chat.completions.create(model="chat-model", messages=HELLO, extra_headers=TRACED)  # type: ignore[arg-type]
        assert resp.usage is not None
    spans = gw.stop()

    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert (server.name, client.name) == ("chat chat-model", "chat gpt-fake")
    assert {trace_id(server), trace_id(client)} == {TRACE_ID}
    assert server.parent is not None and f"{server.parent.span_id:016x}" == CLIENT_SPAN
    assert client.parent is not None and client.parent.span_id == server.context.span_id
    assert server.attributes is not None
    assert server.attributes["gen_ai.usage.input_tokens"] == resp.usage.prompt_tokens
    assert server.attributes["gen_ai.usage.output_tokens"] == resp.usage.completion_tokens
    assert server.attributes["gen_ai.response.model"] == "gpt-fake"
    assert server.attributes["gateway.route.endpoint"] == "fake-a/chat-model"
    # What the fake upstream received: the client's trace id, the attempt span as its parent.
    [received] = upstream.requests_for("gpt-fake")
    sent = sent_traceparent(received)
    assert sent is not None and parts(sent)[:2] == (TRACE_ID, span_id(client))


def test_each_attempt_of_a_fallback_sends_its_own_span_as_parent(
    servers: BackgroundLoop, upstream: FakeOpenAIUpstream
) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        raw = gw.openai.chat.completions.with_raw_response.create(model="fallback-500", messages=HELLO)  # type: ignore[arg-type]
        assert raw.headers["x-gateway-attempts"] == "3"
    spans = gw.stop()

    [server], clients = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert [c.name for c in clients] == ["chat a@status:500", "chat a@status:500", "chat b-ok"]
    assert [c.status.status_code for c in clients] == [StatusCode.ERROR, StatusCode.ERROR, StatusCode.OK]
    sent = [sent_traceparent(r) for r in upstream.requests_for("a@status:500") + upstream.requests_for("b-ok")]
    assert [parts(s)[1] for s in sent if s] == [span_id(c) for c in clients]
    assert len({parts(s)[0] for s in sent if s} | {trace_id(server)}) == 1  # one trace, begun here
    assert server.parent is None


def test_a_stream_span_ends_when_the_stream_has_ended(servers: BackgroundLoop, upstream: FakeOpenAIUpstream) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        stream = gw.openai.chat.completions.create(
            model="chat-model",
            messages=HELLO,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=TRACED,
        )
        chunks = list(stream)
    spans = gw.stop()

    usage = chunks[-1].usage
    assert usage is not None and chunks[0].choices
    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    for span in (server, client):  # the usage came in the last event: they ended after it
        assert span.attributes is not None
        assert span.attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
        assert span.status.status_code != StatusCode.ERROR
    assert client.end_time is not None and server.end_time is not None and client.end_time <= server.end_time
    assert server.attributes is not None and server.attributes["gateway.stream"] is True


def test_a_cut_stream_is_an_error_on_both_spans(servers: BackgroundLoop, upstream: FakeOpenAIUpstream) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        stream = gw.openai.chat.completions.create(model="cut-stream", messages=HELLO, stream=True)  # type: ignore[arg-type]
        with pytest.raises(openai.APIError):
            list(stream)
    spans = gw.stop()

    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert client.status.status_code == server.status.status_code == StatusCode.ERROR
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 502


def test_a_stream_the_client_leaves_ends_its_spans_then(servers: BackgroundLoop) -> None:
    slow = servers.call(FakeOpenAIUpstream(chunk_delay=SLOW_EVENT_S).start())
    try:
        with traced(servers, settings_for(slow, enabled=True)) as gw:
            auth = {"authorization": f"Bearer {KEY}"}
            body = {"model": "chat-model", "messages": HELLO, "stream": True}
            with httpx.Client(timeout=10) as http:
                with http.stream("POST", gw.server.url + "/chat/completions", json=body, headers=auth) as resp:
                    for line in resp.iter_lines():
                        if line.startswith("data: "):
                            break  # the first event, then hang up
            left = time.time_ns()
        spans = gw.stop()
    finally:
        servers.call(slow.stop())

    [server], [client] = of_kind(spans, SpanKind.SERVER), of_kind(spans, SpanKind.CLIENT)
    assert server.attributes is not None and server.attributes["gateway.usage.estimated"] is True  # no last event
    # The rest of the stream would have taken SLOW_EVENT_S an event: the spans ended with the cut.
    for span in (server, client):
        assert span.end_time is not None and span.end_time - left < SLOW_EVENT_S * 1e9


def test_the_messages_and_responses_apis_take_the_clients_trace(
    servers: BackgroundLoop, upstream: FakeOpenAIUpstream
) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        messages = anthropic.Anthropic(base_url=gw.server.root, api_key=KEY, max_retries=0, timeout=10)
        with messages:
            messages.messages.create(model="chat-model", max_tokens=16, messages=HELLO, extra_headers=TRACED)  # type: ignore[arg-type]
        gw.openai.responses.create(model="chat-model", input="hi", extra_headers=TRACED)
    spans = gw.stop()

    servers_spans = of_kind(spans, SpanKind.SERVER)
    assert [s.name for s in servers_spans] == ["chat chat-model", "chat chat-model"]
    assert {trace_id(s) for s in spans} == {TRACE_ID}
    assert [parts(sent_traceparent(r) or "")[0] for r in upstream.requests_for("gpt-fake")] == [TRACE_ID, TRACE_ID]


def test_a_refused_request_is_a_span_and_reaches_no_upstream(
    servers: BackgroundLoop, upstream: FakeOpenAIUpstream
) -> None:
    with traced(servers, settings_for(upstream, enabled=True)) as gw:
        with pytest.raises(openai.NotFoundError):
            gw.openai.chat.completions.create(model="no-such-model", messages=HELLO, extra_headers=TRACED)  # type: ignore[arg-type]
    [span] = gw.stop()

    assert (span.kind, span.name, trace_id(span)) == (SpanKind.SERVER, "chat no-such-model", TRACE_ID)
    assert span.attributes is not None
    assert (span.attributes["error.type"], span.attributes["http.response.status_code"]) == ("ModelNotFound", 404)
    assert upstream.requests == []


def test_spans_reach_an_otlp_collector_from_the_running_gateway(
    servers: BackgroundLoop, upstream: FakeOpenAIUpstream
) -> None:
    collector = servers.call(FakeOTLPCollector().start())
    try:
        settings = settings_for(upstream, enabled=True, endpoint=collector.url, service_name="gw-e2e")
        server = GatewayServer(create_app(settings), servers).start()
        with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=10) as client:
            client.chat.completions.create(model="chat-model", messages=HELLO, extra_headers=TRACED)  # type: ignore[arg-type]
        server.stop()  # the lifespan's close exports the batch

        assert collector.services() == {"gw-e2e"}
        spans = {span.name: span for span in collector.spans()}
        assert set(spans) == {"chat chat-model", "chat gpt-fake"}
        assert {span.trace_id.hex() for span in spans.values()} == {TRACE_ID}
        assert attributes(spans["chat chat-model"])["gen_ai.operation.name"] == "chat"
    finally:
        servers.call(collector.stop())


# -- tracing off ---------------------------------------------------------------------


def test_with_tracing_off_no_traceparent_goes_upstream(servers: BackgroundLoop, upstream: FakeOpenAIUpstream) -> None:
    settings = settings_for(upstream)
    assert not settings.tracing.enabled
    server = GatewayServer(create_app(settings), servers).start()
    try:
        with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=10) as client:
            client.chat.completions.create(model="chat-model", messages=HELLO, extra_headers=TRACED)  # type: ignore[arg-type]
    finally:
        server.stop()

    [received] = upstream.requests_for("gpt-fake")
    assert sent_traceparent(received) is None  # neither the client's nor one of the gateway's


def test_with_tracing_off_no_tracing_observer_is_registered() -> None:
    settings = load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    state = build_state(settings, client=MockHTTPClient(lambda request: MockResponse(200, {}, b"{}")))

    assert state.tracing is None
    assert [type(m).__name__ for m in state.feedback.members if "Tracing" in type(m).__name__] == []
    on = build_state(
        settings.model_copy(update={"tracing": settings.tracing.model_copy(update={"enabled": True})}),
        client=MockHTTPClient(lambda request: MockResponse(200, {}, b"{}")),
        span_exporter=InMemorySpanExporter(),
    )
    assert on.tracing is not None and on.feedback.members[-1] is on.tracing.observer
    on.tracing.provider.shutdown()


def test_with_tracing_off_opentelemetry_is_never_imported() -> None:
    script = (
        "import sys\n"
        "from gateway.runtime import build_state\n"
        "from gateway.config import load_config\n"
        "from providers.http_mock import MockHTTPClient\n"
        "settings = load_config(environ={}, providers=[{'name': 'p', 'base_url': 'http://p.test/v1'}],"
        " deployments=[{'model': 'm', 'provider': 'p'}])\n"
        "build_state(settings, client=MockHTTPClient(lambda r: None))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
