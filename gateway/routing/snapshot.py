"""The read-only view of shared state that filters and policies decide on.

A policy is a pure function of (candidates, snapshot, request features, config, rng): everything
time- or state-dependent comes through this interface. The live implementation
(`gateway.routing.shared.SharedState.snapshot`) answers from local mirrors with no I/O;
`StaticSnapshot` answers from plain dicts, for tests, the simulator and `gwctl route explain`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.catalog import Endpoint, ReportedLoad
from gateway.routing.affinity import CacheProfile, profile_for
from gateway.routing.latency import (
    CLOUD_PRIOR,
    ENGINE_PRIOR,
    EndpointLatency,
    LatencyModel,
    Prior,
)
from gateway.routing.settings import LatencySettings


@dataclass(frozen=True, slots=True)
class EndpointStatic:
    """What scoring reads of an endpoint's configuration, gathered once (not per request)."""

    slots: int | None
    price_in: float
    price_cached: float
    price_out: float
    quality: float
    profile: CacheProfile

    @classmethod
    def of(cls, endpoint: Endpoint) -> EndpointStatic:
        d = endpoint.deployment
        return cls(d.routing.slots, d.price.input, d.price.cached, d.price.output, d.routing.quality, profile_for(endpoint))


class Snapshot(Protocol):
    now: float

    def static(self, endpoint: Endpoint) -> EndpointStatic: ...

    def ready(self, endpoint: Endpoint) -> bool: ...

    def health(self, endpoint_id: str) -> str: ...

    def quality(self, endpoint_id: str) -> float: ...

    def blocked(self, endpoint_id: str) -> str | None:
        """None when the breaker admits a request; else "breaker_open" or "retry_after"."""
        ...

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool: ...

    def inflight(self, endpoint_id: str) -> float: ...

    def pending_prefill(self, endpoint_id: str) -> float: ...

    def reported_load(self, endpoint: Endpoint) -> ReportedLoad | None:
        """The engine's own queue and KV usage, where it reports them (else None)."""
        ...

    def latency(self, endpoint_id: str) -> EndpointLatency: ...

    def match(self, endpoint_id: str, chain: list[int]) -> int: ...

    def reliability(self, endpoint_id: str) -> float: ...

    def residence(self, endpoint_id: str) -> float | None:
        """Seconds an untouched prefix survives in the endpoint's cache; None while it has room."""
        ...

    def profile(self, endpoint: Endpoint) -> CacheProfile: ...

    def sequence(self, model: str) -> int: ...


def prior_for(endpoint: Endpoint) -> tuple[Prior, bool]:
    """The endpoint's latency prior, and whether the operator configured it explicitly."""
    r = endpoint.deployment.routing
    base = ENGINE_PRIOR if r.slots is not None else CLOUD_PRIOR
    explicit = r.ttft_s is not None or r.prefill_tps is not None or r.decode_tps is not None
    return (
        Prior(
            ttft_s=r.ttft_s if r.ttft_s is not None else base.ttft_s,
            prefill_tps=r.prefill_tps if r.prefill_tps is not None else base.prefill_tps,
            decode_tps=r.decode_tps if r.decode_tps is not None else base.decode_tps,
        ),
        explicit,
    )


@dataclass
class StaticSnapshot:
    """A snapshot from plain values; anything not given takes the neutral default."""

    now: float = 0.0
    endpoints: tuple[Endpoint, ...] = ()
    not_ready: frozenset[str] = frozenset()
    health_states: Mapping[str, str] = field(default_factory=dict)
    qualities: Mapping[str, float] = field(default_factory=dict)
    blocks: Mapping[str, str] = field(default_factory=dict)
    no_headroom: frozenset[str] = frozenset()
    inflights: Mapping[str, float] = field(default_factory=dict)
    pending: Mapping[str, float] = field(default_factory=dict)
    reported_loads: Mapping[str, ReportedLoad] = field(default_factory=dict)
    matches: Mapping[str, int] = field(default_factory=dict)
    reliabilities: Mapping[str, float] = field(default_factory=dict)
    residences: Mapping[str, float] = field(default_factory=dict)
    sequences: Mapping[str, int] = field(default_factory=dict)
    latency_settings: LatencySettings = field(default_factory=LatencySettings)
    latency_model: LatencyModel | None = None

    def static(self, endpoint: Endpoint) -> EndpointStatic:
        return EndpointStatic.of(endpoint)

    def __post_init__(self) -> None:
        if self.latency_model is None:
            self.latency_model = LatencyModel(self.latency_settings)
            for ep in self.endpoints:
                prior, explicit = prior_for(ep)
                self.latency_model.configure(ep.id, ep.model, prior, explicit)

    def ready(self, endpoint: Endpoint) -> bool:
        return endpoint.id not in self.not_ready

    def health(self, endpoint_id: str) -> str:
        return self.health_states.get(endpoint_id, "healthy")

    def quality(self, endpoint_id: str) -> float:
        return self.qualities.get(endpoint_id, 1.0)

    def blocked(self, endpoint_id: str) -> str | None:
        return self.blocks.get(endpoint_id)

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        return endpoint.id not in self.no_headroom

    def inflight(self, endpoint_id: str) -> float:
        return self.inflights.get(endpoint_id, 0.0)

    def pending_prefill(self, endpoint_id: str) -> float:
        return self.pending.get(endpoint_id, 0.0)

    def reported_load(self, endpoint: Endpoint) -> ReportedLoad | None:
        return self.reported_loads.get(endpoint.id)

    def latency(self, endpoint_id: str) -> EndpointLatency:
        assert self.latency_model is not None
        return self.latency_model.summary(endpoint_id)

    def match(self, endpoint_id: str, chain: list[int]) -> int:
        return min(self.matches.get(endpoint_id, 0), len(chain))

    def reliability(self, endpoint_id: str) -> float:
        return self.reliabilities.get(endpoint_id, 1.0)

    def residence(self, endpoint_id: str) -> float | None:
        return self.residences.get(endpoint_id)

    def profile(self, endpoint: Endpoint) -> CacheProfile:
        return profile_for(endpoint)

    def sequence(self, model: str) -> int:
        return self.sequences.get(model, 0)
