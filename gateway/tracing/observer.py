"""The tracing observer: one SERVER span per request, named and described by the GenAI semantic
conventions (`chat {model}`, `gen_ai.*`), with one CLIENT span per upstream attempt under it.

The request's span starts at its arrival (`ctx.started`, on the app clock) and ends when the
request is accounted (`finished`): for a stream, when the stream ends or is cut, not when its
headers go out. An attempt's span ends when it fails, when its answer is complete, or (streams)
with the stream. Each attempt's W3C `traceparent` is left in `ctx.spans.upstream_headers` for the
dispatcher to send with it. Every method is O(1) and in memory: ending a span hands it to the batch
processor's queue, which exports from its own thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.catalog import Endpoint
from gateway.pipeline.context import RequestContext
from kernel.errors import GatewayError, ProviderError
from kernel.values import Usage

if TYPE_CHECKING:
    from kernel.records import RequestRecord

# gen_ai.operation.name: the conventions' well-known value for each operation.
OPERATIONS = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings"}
# Request parameters copied to the span (numbers only: the body is the client's).
PARAMETERS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
)
Attributes = dict[str, AttributeValue]


@dataclass(slots=True)
class RequestTrace:
    """A request's spans, kept on its context (`ctx.spans`) while it runs."""

    span: Span
    parent: Context  # the request span's, the attempts' parent
    attempt: Span | None = None
    answered_by: Endpoint | None = None
    # What the current attempt's upstream request carries (the dispatcher adds it).
    upstream_headers: dict[str, str] = field(default_factory=dict)


def traceparent(span: Span) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"


def _usage(attrs: Attributes, usage: Usage | None) -> None:
    if usage is not None:
        attrs["gen_ai.usage.input_tokens"] = usage.prompt_tokens
        attrs["gen_ai.usage.output_tokens"] = usage.completion_tokens
        attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens


def _failed(span: Span, error: BaseException) -> None:
    """The error's class and status, and the text the client reads (an upstream's detail can hold
    a fragment of a key or an internal address: it stays in the request record)."""
    attrs: Attributes = {"error.type": type(error).__name__}
    if isinstance(error, ProviderError) and error.upstream_status is not None:
        attrs["http.response.status_code"] = error.upstream_status
    span.set_attributes(attrs)
    span.set_status(Status(StatusCode.ERROR, error.client_message() if isinstance(error, GatewayError) else None))


class TracingObserver:
    """A `RequestObserver` (gateway.pipeline.observe) that records each request as spans."""

    def __init__(self, tracer: Tracer, *, clock: Callable[[], float], trust_incoming: bool = True) -> None:
        self._tracer = tracer
        self._clock = clock
        self._trust = trust_incoming
        self._propagator = TraceContextTextMapPropagator()
        self._servers: dict[str, Attributes] = {}  # endpoint id -> server.address/port

    def _ns(self, t: float) -> int:
        """Epoch nanoseconds (what spans carry) of a time on the app clock."""
        return time.time_ns() - int((self._clock() - t) * 1e9)

    def _start(self, ctx: RequestContext) -> RequestTrace:
        parent = None
        if self._trust and ctx.traceparent:  # a malformed one extracts to nothing: a new trace
            parent = self._propagator.extract({"traceparent": ctx.traceparent})
        op = OPERATIONS.get(ctx.op, ctx.op)
        attrs: Attributes = {
            "gen_ai.operation.name": op,
            "gateway.request_id": ctx.request_id,
            "gateway.stream": ctx.stream,
        }
        if ctx.model:
            attrs["gen_ai.request.model"] = ctx.model
        if ctx.key_name:
            attrs["gateway.key"] = ctx.key_name
        body = ctx.body
        for name, attr in PARAMETERS:
            value = body.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[attr] = value
        span = self._tracer.start_span(
            f"{op} {ctx.model}" if ctx.model else op,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attrs,
            start_time=self._ns(ctx.started),
        )
        trace = ctx.spans = RequestTrace(span, set_span_in_context(span))
        return trace

    def _trace(self, ctx: RequestContext) -> RequestTrace:
        trace = ctx.spans
        return trace if isinstance(trace, RequestTrace) else self._start(ctx)

    def _server(self, endpoint: Endpoint) -> Attributes:
        attrs = self._servers.get(endpoint.id)
        if attrs is None:
            url = urlsplit(endpoint.target.base_url)
            attrs = {"server.address": url.hostname or ""}
            try:
                if url.port is not None:
                    attrs["server.port"] = url.port
            except ValueError:  # not a number: the address alone (a request path never raises)
                pass
            self._servers[endpoint.id] = attrs
        return attrs

    def probe_headers(self, op: str, endpoint: Endpoint) -> dict[str, str]:
        """The trace context a probe's request carries upstream, as a user's would: a new trace,
        sampled as theirs are. Without it a probe stood out wherever tracing is on. A sampled one is
        recorded as a CLIENT span marked `gateway.probe` (its duration is not measured)."""
        name = OPERATIONS.get(op, op)
        model = endpoint.target.upstream_model
        attrs: Attributes = {
            "gen_ai.operation.name": name,
            "gen_ai.request.model": model,
            "gen_ai.provider.name": endpoint.kind,
            "gateway.endpoint": endpoint.id,
            "gateway.provider": endpoint.provider,
            "gateway.probe": True,
            **self._server(endpoint),
        }
        span = self._tracer.start_span(f"{name} {model}", kind=SpanKind.CLIENT, attributes=attrs)
        span.end()
        return {"traceparent": traceparent(span)}

    def request_started(self, ctx: RequestContext) -> None:
        self._trace(ctx)

    def attempt_started(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        trace = self._trace(ctx)
        if trace.attempt is not None:  # not expected: every attempt is told failed or committed first
            trace.attempt.end(self._ns(now))
            trace.attempt = None
        if not trace.span.is_recording():  # sampled out: no attempt spans, the trace still goes on
            if not trace.upstream_headers:
                trace.upstream_headers = {"traceparent": traceparent(trace.span)}
            return
        op = OPERATIONS.get(ctx.op, ctx.op)
        model = endpoint.target.upstream_model
        attrs: Attributes = {
            "gen_ai.operation.name": op,
            "gen_ai.request.model": model,
            "gen_ai.provider.name": endpoint.kind,
            "gateway.endpoint": endpoint.id,
            "gateway.provider": endpoint.provider,
            "gateway.attempt": ctx.attempts,
            **self._server(endpoint),
        }
        span = self._tracer.start_span(
            f"{op} {model}", context=trace.parent, kind=SpanKind.CLIENT, attributes=attrs, start_time=self._ns(now)
        )
        trace.attempt = span
        trace.upstream_headers = {"traceparent": traceparent(span)}

    def attempt_committed(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        trace = self._trace(ctx)
        trace.answered_by = endpoint
        span = trace.attempt
        if span is None or ctx.stream:  # a stream's attempt lasts as long as the stream
            return
        attrs: Attributes = {"gen_ai.response.model": endpoint.target.upstream_model}
        _usage(attrs, ctx.usage)
        span.set_attributes(attrs)
        span.set_status(Status(StatusCode.OK))
        span.end(self._ns(now))
        trace.attempt = None

    def attempt_failed(self, ctx: RequestContext, endpoint: Endpoint, now: float, error: BaseException) -> None:
        trace = self._trace(ctx)
        span = trace.attempt
        if span is None:
            return
        _failed(span, error)
        span.end(self._ns(now))
        trace.attempt = None

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        trace = self._trace(ctx)  # a request refused before dispatch gets its span here
        end = time.time_ns()
        ctx.spans = None
        if not trace.span.is_recording():  # sampled out: nothing to describe
            if trace.attempt is not None:
                trace.attempt.end(end)
            trace.span.end(end)
            return
        failed = ctx.status >= 400
        attempt = trace.attempt
        if attempt is not None:  # a committed stream's attempt: it ended with the stream
            attrs: Attributes = {}
            if trace.answered_by is not None:
                attrs["gen_ai.response.model"] = trace.answered_by.target.upstream_model
            _usage(attrs, ctx.usage)
            attempt.set_attributes(attrs)
            attempt.set_status(Status(StatusCode.ERROR if failed else StatusCode.OK))
            attempt.end(end)
            trace.attempt = None
        attrs = {"gateway.attempts": ctx.attempts, "http.response.status_code": ctx.status}
        if ctx.endpoint_id:
            attrs["gateway.route.endpoint"] = ctx.endpoint_id
        answered = trace.answered_by
        if answered is not None:
            attrs["gen_ai.response.model"] = answered.target.upstream_model
            attrs["gen_ai.provider.name"] = answered.kind
        usage = ctx.usage
        _usage(attrs, usage)
        attrs["gateway.cache.hit"] = usage is not None and usage.cached_tokens > 0
        if ctx.usage_estimated:
            attrs["gateway.usage.estimated"] = True
        if ctx.ttft is not None:
            attrs["gateway.ttft_s"] = ctx.ttft
        if record is not None:
            attrs["gateway.cost_usd"] = record.cost_usd
        route = ctx.route
        if route is not None:
            decision = route.decision
            attrs["gateway.route.policy"] = decision.policy
            if decision.guard:
                attrs["gateway.route.guard"] = decision.guard
            if ctx.endpoint_id and ctx.endpoint_id in route.predicted:
                attrs["gateway.cache.predicted_tokens"] = route.predicted[ctx.endpoint_id][1]
        if ctx.fail_open:
            attrs["gateway.route.fail_open"] = ctx.fail_open
        span = trace.span
        span.set_attributes(attrs)
        if failed:
            span.set_attribute("error.type", ctx.error or str(ctx.status))
            if ctx.status >= 500:  # a server span's 4xx is the client's fault: status left unset
                span.set_status(Status(StatusCode.ERROR))
        span.end(end)
