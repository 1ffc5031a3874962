"""`Snapshot` over routing's local mirrors at one instant (`SharedState.snapshot`). No I/O."""

from __future__ import annotations

from typing import Protocol

from gateway.catalog import Endpoint, ReportedLoad
from gateway.routing.affinity import AffinityIndex, CacheProfile, profile_for
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.health_view import HealthView
from gateway.routing.latency import EndpointLatency, LatencyModel
from gateway.routing.load import Load
from gateway.routing.rates import RateCounts
from gateway.routing.snapshot import EndpointStatic


class Mirrors(Protocol):
    """The local state a snapshot reads: `SharedState` is one."""

    statics: dict[str, EndpointStatic]
    profiles: dict[str, CacheProfile]
    health: HealthView
    breaker: CircuitBreaker
    load: Load
    rates: RateCounts
    latency: LatencyModel
    affinity: AffinityIndex
    sequences: dict[str, int]


class LiveSnapshot:
    __slots__ = ("_m", "now")

    def __init__(self, mirrors: Mirrors, now: float) -> None:
        self._m = mirrors
        self.now = now

    def ready(self, endpoint: Endpoint) -> bool:
        return endpoint.is_ready()

    def static(self, endpoint: Endpoint) -> EndpointStatic:
        static = self._m.statics.get(endpoint.id)
        if static is None:
            static = self._m.statics[endpoint.id] = EndpointStatic.of(endpoint)
        return static

    def health(self, endpoint_id: str) -> str:
        return self._m.health.state(endpoint_id)

    def quality(self, endpoint_id: str) -> float:
        entry = self._m.health.get(endpoint_id)
        score = getattr(entry, "score", None)
        if score is None:
            return 1.0
        return min(1.0, max(0.05, float(score)))

    def blocked(self, endpoint_id: str) -> str | None:
        breaker = self._m.breaker
        if endpoint_id not in breaker._endpoints or breaker.allows(endpoint_id, self.now):
            return None
        return "retry_after" if self.now < breaker.blocked_until(endpoint_id) else "breaker_open"

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        return self._m.rates.headroom(endpoint, tokens)

    def inflight(self, endpoint_id: str) -> float:
        return self._m.load.inflight(endpoint_id)

    def pending_prefill(self, endpoint_id: str) -> float:
        return self._m.load.pending_prefill(endpoint_id)

    def reported_load(self, endpoint: Endpoint) -> ReportedLoad | None:
        return endpoint.reported_load()

    def latency(self, endpoint_id: str) -> EndpointLatency:
        latency = self._m.latency
        summary = latency._summary.get(endpoint_id)
        return summary if summary is not None else latency.summary(endpoint_id)

    def match(self, endpoint_id: str, chain: list[int]) -> int:
        return self._m.affinity.match(endpoint_id, chain, self.now)

    def reliability(self, endpoint_id: str) -> float:
        return self._m.affinity.reliability(endpoint_id)

    def residence(self, endpoint_id: str) -> float | None:
        return self._m.affinity.residence(endpoint_id, self.now)

    def profile(self, endpoint: Endpoint) -> CacheProfile:
        profile = self._m.profiles.get(endpoint.id)
        if profile is None:
            profile = self._m.profiles[endpoint.id] = profile_for(endpoint)
        return profile

    def sequence(self, model: str) -> int:
        return self._m.sequences.get(model, 0)
