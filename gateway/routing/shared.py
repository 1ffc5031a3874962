"""Routing state: local mirrors read by the decision path, kept in step with the StateStore by a
background sync loop (`gateway.routing.sync`).

The decision path never waits on the store: it reads the breaker, in-flight counts
(`gateway.routing.load`), latency summaries, rate usage (`gateway.routing.rates`) and the
affinity index from memory (`LiveSnapshot`). What this replica changes is queued
(`gateway.routing.outbox`) and pushed every `sync_interval_s` (sooner after a breaker change);
what the others changed is pulled in the same tick. The one awaited store call on the request
path is a key's RPM/TPM admission, which must be exact across replicas; it is skipped for keys
without limits, and falls back to a local window while the store is away.

Health states travel the same way (`gateway.routing.health_feed`): a transition is published as
it happens, and each tick pulls every endpoint's stored state into `HealthStates.apply`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from gateway.catalog import Catalog, Endpoint
from gateway.routing.affinity import AffinityIndex, CacheProfile, profile_for
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.features import blocks_of
from gateway.routing.health_feed import HealthFeed
from gateway.routing.health_view import AllHealthy, HealthView
from gateway.routing.latency import LatencyModel
from gateway.routing.live_snapshot import LiveSnapshot
from gateway.routing.load import Load
from gateway.routing.outbox import Outbox
from gateway.routing.rates import RateCounts, bounded
from gateway.routing.settings import KeyPolicy, RoutingConfig
from gateway.routing.snapshot import EndpointStatic, prior_for
from gateway.routing.sync import StoreSync, sync_limit_s
from gateway.state_store.base import StateStore, StoreRejected, StoreUnavailable, rate_key
from gateway.state_store.config import StateStoreConfig
from kernel.errors import RateLimited
from kernel.tasks import Heartbeat

log = logging.getLogger("gateway.state")

__all__ = ["AllHealthy", "HealthView", "LiveSnapshot", "SharedState", "default_replica_id", "sync_limit_s"]


def default_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class SharedState:
    def __init__(
        self,
        routing: RoutingConfig,
        store_cfg: StateStoreConfig,
        catalog: Catalog,
        store: StateStore,
        breaker: CircuitBreaker,
        *,
        health: HealthView | None = None,
        health_feed: HealthFeed | None = None,
        clock: Callable[[], float] = time.perf_counter,
        replica_id: str | None = None,
        beat: Heartbeat | None = None,
    ) -> None:
        self.cfg = routing
        # The sync loop's heartbeat (the app registers it in its LoopHealth, for /readyz).
        self.beat = beat or Heartbeat("state sync", sync_limit_s(store_cfg), log=log)
        self.store_cfg = store_cfg
        self.catalog = catalog
        self.store = store
        self.breaker = breaker
        self.health: HealthView = health or AllHealthy()
        # The state store's half of the health write path (the app makes it one of the sinks of
        # `health`); without one, health states are this process's own.
        self.health_feed = health_feed
        self.clock = clock
        self.replica = replica_id or store_cfg.replica_id or default_replica_id()
        a = routing.affinity
        self.affinity = AffinityIndex(
            blocks=blocks_of(a), max_blocks=a.max_blocks_per_endpoint, alpha=a.reliability_alpha
        )
        self.latency = LatencyModel(routing.latency)
        self.profiles: dict[str, CacheProfile] = {}
        self.statics: dict[str, EndpointStatic] = {}
        for ep in catalog.endpoints:
            profile = self.profiles[ep.id] = profile_for(ep)
            self.statics[ep.id] = EndpointStatic.of(ep)
            self.affinity.configure(ep.id, profile)
            prior, explicit = prior_for(ep)
            self.latency.configure(ep.id, ep.model, prior, explicit)
        self.load = Load()
        self.rates = RateCounts(catalog.endpoints)
        self.outbox = Outbox(self.replica, store_cfg.max_pending_affinity)
        self.sequences: dict[str, int] = {}
        self.sync = StoreSync(
            routing,
            store_cfg,
            store,
            endpoint_ids=[ep.id for ep in catalog.endpoints],
            replica=self.replica,
            breaker=breaker,
            latency=self.latency,
            affinity=self.affinity,
            health=self.health,
            health_feed=health_feed,
            load=self.load,
            rates=self.rates,
            outbox=self.outbox,
            clock=clock,
            beat=self.beat,
        )
        breaker.listener = self._on_breaker

    # -- the decision path: reads -------------------------------------------------------

    def snapshot(self, now: float | None = None) -> LiveSnapshot:
        return LiveSnapshot(self, self.clock() if now is None else now)

    def inflight(self, endpoint_id: str) -> int:
        return self.load.inflight(endpoint_id)

    def pending_prefill(self, endpoint_id: str) -> int:
        return self.load.pending_prefill(endpoint_id)

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        return self.rates.headroom(endpoint, tokens)

    def next_sequence(self, model: str) -> int:
        n = self.sequences.get(model, 0)
        self.sequences[model] = n + 1
        return n

    # -- the request path: writes ---------------------------------------------------------

    async def admit_key(self, key_name: str | None, policy: KeyPolicy, tokens: int) -> None:
        """Count this request against its key's RPM/TPM (exact across replicas while the store
        answers); RateLimited (429) when over."""
        if policy.rpm is None and policy.tpm is None:
            return
        key = rate_key("key", key_name or "-")
        window = self.cfg.rate_window_s
        tokens = bounded(tokens)
        result = None
        if self.sync.store_ok is not False:
            try:
                result = await self.store.rate_acquire(
                    key, rpm=policy.rpm, tpm=policy.tpm, tokens=tokens, window_s=window
                )
            except StoreRejected:
                pass  # these counts, not the store: decided on the local window
            except StoreUnavailable as exc:
                self.sync.store_failed(exc)
        if result is None:
            result = self.rates.acquire_locally(key, self.clock(), window, policy.rpm, policy.tpm, tokens)
        if not result.allowed:
            which = "requests" if policy.rpm is not None and result.requests + 1 > policy.rpm else "tokens"
            limit = policy.rpm if which == "requests" else policy.tpm
            wait = max(1, round(result.retry_after + 0.4999))
            raise RateLimited(
                f"Rate limit reached for key {key_name or '(open access)'}: {limit} {which} per "
                f"{window:g} s. Try again in {wait} s.",
                headers={"retry-after": str(wait)},
            )

    def adjust_key_tokens(self, key_name: str | None, policy: KeyPolicy, delta: int) -> None:
        if policy.tpm is not None and delta:
            self.rates.add(rate_key("key", key_name or "-"), 0, delta)

    def started(self, endpoint: Endpoint, prefill_tokens: int, tokens: int) -> None:
        self.load.started(endpoint.id, prefill_tokens)
        self.rates.add_deployment(endpoint.id, 1, tokens)

    def prefilled(self, endpoint_id: str, prefill_tokens: int) -> None:
        self.load.prefilled(endpoint_id, prefill_tokens)

    def ended(self, endpoint_id: str) -> None:
        if self.load.ended(endpoint_id) == 0:
            self.sync.wake()  # an idle endpoint: tell the other replicas soon, not a tick later

    def adjust_deployment_tokens(self, endpoint_id: str, delta: int) -> None:
        self.rates.add_deployment(endpoint_id, 0, delta)

    def learn_affinity(
        self, endpoint_id: str, chain: list[int], predicted_blocks: int, cached_blocks: int | None
    ) -> None:
        if not chain:
            return
        self.affinity.observe(endpoint_id, chain, predicted_blocks, cached_blocks, self.clock())
        self.outbox.learned(endpoint_id, chain)

    def _on_breaker(self, endpoint_id: str, open_for: float | None, blocked_for: float) -> None:
        """Queue a breaker change for publication, and sync soon."""
        self.outbox.breaker_changed(endpoint_id, open_for, blocked_for, self.clock())
        self.sync.wake()

    # -- the sync loop (`gateway.routing.sync`) ---------------------------------------------

    async def sync_once(self) -> bool:
        """Push local changes, pull the others'. False (and local state kept) if the store failed."""
        return await self.sync.sync_once()

    def start(self) -> None:
        self.sync.start()

    async def aclose(self, timeout: float | None = None) -> None:
        """Stop the loop, push what is left (within `timeout`, default 8 x timeout_s), close the store."""
        await self.sync.aclose(timeout)

    @property
    def store_ok(self) -> bool | None:
        return self.sync.store_ok

    @property
    def last_sync(self) -> float | None:
        return self.sync.last_sync

    @property
    def resyncs(self) -> int:
        return self.sync.resyncs

    def status(self) -> dict[str, Any]:
        return self.sync.status()
