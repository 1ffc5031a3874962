"""Tracing over the SDK's in-memory exporter, and a client's W3C trace context to send."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.tracing.settings import TracingConfig
from gateway.tracing.wiring import Tracing, build_tracing

# The W3C spec's own example: a client's trace, sampled.
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


def in_memory(clock: Callable[[], float], **cfg: Any) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    cfg.setdefault("trust_incoming", True)  # most tests follow a client's trace; the default is off
    return build_tracing(TracingConfig(enabled=True, **cfg), clock=clock, exporter=exporter), exporter


def finished(tracing: Tracing, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The spans ended so far (the batch processor exports them on a flush)."""
    assert tracing.provider.force_flush()
    return list(exporter.get_finished_spans())


def of_kind(spans: list[ReadableSpan], kind: SpanKind) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.kind == kind), key=lambda s: s.start_time or 0)


def parts(traceparent: str) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of a traceparent header."""
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00"
    return trace_id, span_id, flags


def span_id(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


def trace_id(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"
