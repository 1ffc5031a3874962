"""The tracing the app builds: spans exported by the real OTLP/HTTP exporter to a collector on
loopback (protobuf decoded there), a close bounded by the shutdown budget, and a clear error when
the SDK is missing."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from gateway.pipeline.context import RequestContext
from gateway.tracing.settings import TracingConfig
from gateway.tracing.wiring import build_tracing
from kernel.errors import ConfigError
from kernel.tasks import Deadline
from kernel.values import Usage
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock
from tests.fakes.otlp_collector import FakeOTLPCollector, attributes
from tests.gateway.tracing.helpers import CLIENT_SPAN, TRACE_ID, TRACEPARENT

ENDPOINT = make_endpoint("a/m", base_url="http://a.test/v1", upstream_model="up-a")
COLLECTOR_KEY = "sk-collector-secret-0001"


def one_request(observer: object, clock: FakeClock) -> None:
    """The events of one answered request, as the pipeline tells them."""
    ctx = RequestContext(request_id="req_otlp", op="chat", started=clock())
    ctx.model, ctx.traceparent = "m", TRACEPARENT
    observer.request_started(ctx)  # type: ignore[attr-defined]
    ctx.attempts, ctx.endpoint_id = 1, ENDPOINT.id
    observer.attempt_started(ctx, ENDPOINT, clock())  # type: ignore[attr-defined]
    ctx.usage, ctx.committed = Usage(prompt_tokens=7, completion_tokens=2), True
    observer.attempt_committed(ctx, ENDPOINT, clock())  # type: ignore[attr-defined]
    observer.finished(ctx, None)  # type: ignore[attr-defined]


async def test_spans_reach_an_otlp_collector_over_http_protobuf() -> None:
    clock = FakeClock()
    async with FakeOTLPCollector() as collector:
        cfg = TracingConfig(
            enabled=True,
            endpoint=collector.url,
            headers={"x-collector-key": COLLECTOR_KEY},
            service_name="gw-test",
            trust_incoming=True,
        )
        tracing = build_tracing(cfg, clock=clock)
        one_request(tracing.observer, clock)

        assert collector.exports == []  # batched: nothing leaves on the request path
        await tracing.aclose()  # the last batch, exported before the provider stops

        [export] = collector.exports
        assert export.headers["x-collector-key"] == COLLECTOR_KEY
        assert export.headers["Content-Encoding"] == "gzip"
        assert collector.services() == {"gw-test"}
        spans = {span.name: span for span in collector.spans()}
        assert set(spans) == {"chat m", "chat up-a"}
        server, client = spans["chat m"], spans["chat up-a"]
        assert server.trace_id.hex() == client.trace_id.hex() == TRACE_ID
        assert server.parent_span_id.hex() == CLIENT_SPAN
        assert client.parent_span_id == server.span_id
        assert server.kind == server.SPAN_KIND_SERVER and client.kind == client.SPAN_KIND_CLIENT
        assert attributes(server)["gen_ai.usage.input_tokens"] == 7
        assert attributes(server)["gen_ai.provider.name"] == "openai"
        assert attributes(client)["gateway.endpoint"] == "a/m"


async def test_closing_is_cut_short_by_the_shutdown_budget_when_the_collector_hangs() -> None:
    clock = FakeClock()
    async with FakeOTLPCollector() as collector:
        collector.hold()  # takes the export, never answers
        cfg = TracingConfig(enabled=True, endpoint=collector.url, export_timeout_s=120)
        tracing = build_tracing(cfg, clock=clock)
        one_request(tracing.observer, clock)

        closed = await Deadline(0.2).run(tracing.aclose(), "the traces' export")

        assert not closed  # the close gave up at the budget, the loop was never blocked
        await collector.received.wait()  # the export had reached the collector, which holds it
        collector.release()
        shutting = [t for t in threading.enumerate() if t.name == "otel-shutdown"]
        assert shutting and all(t.daemon for t in shutting)  # nor would it hold the process at exit
        for thread in shutting:
            await asyncio.to_thread(thread.join)


def test_building_without_the_sdk_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = TracingConfig(enabled=True)  # (the config itself refuses this: test_settings.py)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # what an absent package raises

    with pytest.raises(ConfigError, match="tracing.enabled needs the OpenTelemetry SDK"):
        build_tracing(cfg, clock=FakeClock())
