"""Prometheus metrics, in a registry that belongs to one app (never the process-global one).

Labels are bounded: endpoint and provider come from the catalog, model is a catalog model or
"unknown", status is a class ("2xx"), error is an error class name, api the API the client spoke
(chat, completions, embeddings, responses, messages). Never a request id or a key.

- `MetricsSink` is an accountant sink: a few counter increments and histogram observations per
  request on pre-bound children (about 1 µs each).
- State that already lives elsewhere (breakers, health states, the persistence queue) is read at
  scrape time by collectors, so it costs nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.catalog import Catalog
from gateway.health_states import HealthStates
from gateway.pipeline.context import RequestContext
from gateway.pipeline.observe import RecordObserver
from gateway.routing.breaker import CircuitBreaker
from kernel.health import STATES
from kernel.records import RequestRecord
from kernel.tasks import LoopHealth

LABELS = ("endpoint", "model", "provider")
NO_ENDPOINT = "none"
UNKNOWN_MODEL = "unknown"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
BREAKER_VALUES = {"closed": 0, "half_open": 1, "open": 2}


class GatewayMetrics:
    def __init__(self, catalog: Catalog) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests",
            "Requests finished, by endpoint, client API and status class.",
            [*LABELS, "api", "status_class"],
            registry=r,
        )
        self.errors = Counter(
            "gateway_request_errors", "Failed requests, by error class.", [*LABELS, "error"], registry=r
        )
        self.latency = Histogram(
            "gateway_request_latency_seconds", "Total request latency.", LABELS, buckets=LATENCY_BUCKETS, registry=r
        )
        self.ttft = Histogram(
            "gateway_ttft_seconds", "Time to the first streamed event.", LABELS, buckets=TTFT_BUCKETS, registry=r
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Time the gateway itself added (not upstream waits).",
            LABELS,
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens by kind: prompt, cached (part of prompt), completion.",
            [*LABELS, "kind"],
            registry=r,
        )
        self.cost = Counter("gateway_cost_usd", "Cost in USD at the configured prices.", LABELS, registry=r)
        self.probe_runs = Counter(
            "gateway_probe_runs", "Probe outcomes, by probe and verdict.", ["endpoint", "probe", "verdict"], registry=r
        )
        self.tool_calls = Counter(
            "gateway_tool_calls",
            "Tool calls in live responses, by validator result (ok, invalid_json, unknown_name, schema_mismatch, ...).",
            ["endpoint", "result"],
            registry=r,
        )
        self.sink = MetricsSink(self, catalog)

    def tool_call_results(self, endpoint_id: str, counts: Mapping[str, int]) -> None:
        for result, n in counts.items():
            self.tool_calls.labels(endpoint_id, result).inc(n)

    def probe_outcome(self, endpoint_id: str, probe: str, verdict: str) -> None:
        self.probe_runs.labels(endpoint_id, probe, verdict).inc()

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(slots=True)
class _Series:
    labels: tuple[str, str, str]
    latency: Any
    ttft: Any
    overhead: Any
    prompt: Any
    cached: Any
    completion: Any
    cost: Any
    requests: dict[tuple[str, int], Any]  # by (client API, status class)
    errors: dict[str, Any]


class MetricsSink(RecordObserver):
    """Updates the request metrics from each finished request's record (a `RequestObserver`)."""

    def __init__(self, metrics: GatewayMetrics, catalog: Catalog) -> None:
        self._m = metrics
        self._catalog = catalog
        self._series: dict[tuple[str | None, str], _Series] = {}

    def _bind(self, endpoint_id: str | None, model: str) -> _Series:
        ep = self._catalog.by_id.get(endpoint_id) if endpoint_id else None
        labels = (ep.id, ep.model, ep.provider) if ep else (NO_ENDPOINT, model, NO_ENDPOINT)
        m = self._m
        return _Series(
            labels,
            m.latency.labels(*labels),
            m.ttft.labels(*labels),
            m.overhead.labels(*labels),
            m.tokens.labels(*labels, "prompt"),
            m.tokens.labels(*labels, "cached"),
            m.tokens.labels(*labels, "completion"),
            m.cost.labels(*labels),
            {},
            {},
        )

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        if record is not None:
            self.submit(record)

    def submit(self, r: RequestRecord) -> None:
        model = r.model if self._catalog.has_model(r.model) else UNKNOWN_MODEL
        key = (r.endpoint_id, model)
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = self._bind(r.endpoint_id, model)
        klass = r.status // 100
        api = r.api or r.op
        counter = s.requests.get((api, klass))
        if counter is None:
            counter = s.requests[api, klass] = self._m.requests.labels(*s.labels, api, f"{klass}xx")
        counter.inc()
        if r.error:
            err = s.errors.get(r.error)
            if err is None:
                err = s.errors[r.error] = self._m.errors.labels(*s.labels, r.error)
            err.inc()
        s.latency.observe(r.latency_s)
        s.overhead.observe(r.overhead_ms / 1000.0)
        if r.ttft_s is not None:
            s.ttft.observe(r.ttft_s)
        if r.prompt_tokens:
            s.prompt.inc(r.prompt_tokens)
        if r.cached_tokens:
            s.cached.inc(r.cached_tokens)
        if r.completion_tokens:
            s.completion.inc(r.completion_tokens)
        if r.cost_usd:
            s.cost.inc(r.cost_usd)


class EndpointStateCollector(Collector):
    """Breaker state, health state and score, and readiness of each endpoint, read at scrape time."""

    def __init__(
        self, catalog: Catalog, breaker: CircuitBreaker, health: HealthStates, clock: Callable[[], float]
    ) -> None:
        self._catalog = catalog
        self._breaker = breaker
        self._health = health
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        breaker = GaugeMetricFamily(
            "gateway_breaker_state", "Circuit breaker: 0 closed, 1 half-open, 2 open.", labels=["endpoint"]
        )
        health = GaugeMetricFamily(
            "gateway_health_state", "1 for the endpoint's current health state.", labels=["endpoint", "state"]
        )
        manual = GaugeMetricFamily("gateway_health_manual", "1 when an operator pinned the state.", labels=["endpoint"])
        score = GaugeMetricFamily(
            "gateway_health_score", "The endpoint's quality score, when probes set one.", labels=["endpoint"]
        )
        ready = GaugeMetricFamily(
            "gateway_endpoint_ready", "1 when the endpoint can take traffic.", labels=["endpoint"]
        )
        for ep in self._catalog.endpoints:
            breaker.add_metric([ep.id], BREAKER_VALUES[self._breaker.state(ep.id, now)])
            entry = self._health.get(ep.id)
            for state in STATES:
                health.add_metric([ep.id, state], 1.0 if entry.state == state else 0.0)
            manual.add_metric([ep.id], 1.0 if entry.manual else 0.0)
            if entry.score is not None:
                score.add_metric([ep.id], entry.score)
            ready.add_metric([ep.id], 1.0 if ep.is_ready() else 0.0)
        yield from (breaker, health, manual, score, ready)


class PersistenceCollector(Collector):
    """The request-record queue, the spill file and the writer's counters, read at scrape time."""

    def __init__(self, persistence: Any) -> None:
        self._p = persistence

    def collect(self) -> Iterator[Metric]:
        p = self._p
        stats = p.stats
        yield GaugeMetricFamily(
            "gateway_persistence_queue_depth", "Request records waiting in memory.", value=len(p.queue)
        )
        yield GaugeMetricFamily("gateway_persistence_queue_capacity", "The queue's bound.", value=p.capacity)
        yield GaugeMetricFamily(
            "gateway_persistence_spill_bytes", "Bytes waiting in the spill file.", value=p.spill.size
        )
        yield GaugeMetricFamily(
            "gateway_persistence_db_up", "1 when the last database write succeeded.", value=1.0 if stats.db_up else 0.0
        )
        for name, doc, value in (
            ("written_records", "Request records written to the database.", stats.written),
            ("spilled_records", "Request records spilled to the file (queue full).", stats.spilled),
            ("replayed_records", "Spilled request records replayed into the database.", stats.replayed),
            ("dropped_records", "Request records dropped: queue full and spill file full or failing.", stats.dropped),
            ("rejected_records", "Request records the database refused as data (not retried).", stats.rejected),
            ("unserialisable_records", "Request records that could not be encoded (dropped).", stats.unserialisable),
            ("write_errors", "Failed database writes (each retried).", stats.write_errors),
        ):
            yield CounterMetricFamily(f"gateway_persistence_{name}", doc, value=value)


class LoopCollector(Collector):
    """Each background loop's last success (unix seconds), failures and staleness, read at scrape time."""

    def __init__(self, loops: LoopHealth) -> None:
        self._loops = loops

    def collect(self) -> Iterator[Metric]:
        last = GaugeMetricFamily(
            "gateway_background_last_success_timestamp_seconds",
            "When the background loop last completed a round (unix seconds).",
            labels=["loop"],
        )
        stale = GaugeMetricFamily(
            "gateway_background_stale", "1 when the loop has not succeeded within its limit.", labels=["loop"]
        )
        failures = CounterMetricFamily(
            "gateway_background_failures", "Unexpected exceptions in the loop (each logged; the loop goes on).", labels=["loop"]
        )
        for name, beat in self._loops.loops.items():
            if beat.last_success is not None:
                last.add_metric([name], beat.last_success)
            stale.add_metric([name], 1.0 if beat.stale() else 0.0)
            failures.add_metric([name], beat.failures)
        yield from (last, stale, failures)


def build_metrics(
    catalog: Catalog,
    breaker: CircuitBreaker,
    health: HealthStates,
    clock: Callable[[], float],
    persistence: Any = None,
    *,
    loops: LoopHealth | None = None,
) -> GatewayMetrics:
    metrics = GatewayMetrics(catalog)
    metrics.add_collector(EndpointStateCollector(catalog, breaker, health, clock))
    if persistence is not None:
        metrics.add_collector(PersistenceCollector(persistence))
    if loops is not None:
        metrics.add_collector(LoopCollector(loops))
    return metrics
