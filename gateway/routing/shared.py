"""Routing state: local mirrors read by the decision path, kept in step with the StateStore by a
background sync loop.

The decision path never waits on the store: it reads the breaker, in-flight counts, latency
summaries, rate usage and the affinity index from memory (`LiveSnapshot`). What this replica
changes is queued and pushed every `sync_interval_s` (sooner after a breaker change); what the
others changed is pulled in the same tick. The one awaited store call on the request path is a
key's RPM/TPM admission, which must be exact across replicas; it is skipped for keys without
limits, and falls back to a local window while the store is away.

When the store fails, the gateway keeps serving on local state, logs it once, and reports it in
`/readyz`; when the store answers again, the loop republishes this replica's breaker states,
in-flight counts, unsynced latency and rate deltas and buffered affinity entries (resync).

Health states travel the same way (`gateway.routing.health_feed`): a transition is published as
it happens, and each tick pulls every endpoint's stored state into `HealthStates.apply`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gateway.catalog import Catalog, Endpoint, ReportedLoad
from gateway.routing.affinity import AffinityIndex, CacheProfile, profile_for
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.features import blocks_of
from gateway.routing.health_feed import HealthFeed
from gateway.routing.latency import EndpointLatency, LatencyModel
from gateway.routing.settings import KeyPolicy, RoutingConfig
from gateway.routing.snapshot import EndpointStatic, prior_for
from gateway.state_store.base import (
    AffinityEntry,
    StateStore,
    StoreRejected,
    StoreUnavailable,
    rate_key,
)
from gateway.state_store.config import StateStoreConfig
from gateway.state_store.window import SlidingWindow
from kernel.errors import RateLimited
from kernel.tasks import Heartbeat, cancel_and_wait, run_forever

log = logging.getLogger("gateway.state")

AFFINITY_READ_LIMIT = 5000
# A pending rate count stays well inside every store's integer range (Redis: below 1e17).
MAX_RATE_DELTA = 10**15


def _bounded(n: int) -> int:
    return max(-MAX_RATE_DELTA, min(MAX_RATE_DELTA, n))

# Every local health state is published again this often, so the store's copy never expires
# (`HEALTH_TTL_S`) while a replica still holds it.
HEALTH_REPUBLISH_S = 86_400.0

# After a wake-up (a breaker change, an endpoint going idle), sync this soon rather than at once
# (and so at most this often beyond the regular interval).
WAKE_GAP_S = 0.05


class HealthView(Protocol):
    """What routing reads of endpoint health (`gateway.health_states.HealthStates` provides it)."""

    def state(self, endpoint_id: str) -> str: ...

    def get(self, endpoint_id: str) -> Any: ...

    def snapshot(self) -> Mapping[str, Any]: ...

    def apply(self, stored: Mapping[str, Any]) -> int: ...


class AllHealthy:
    def state(self, endpoint_id: str) -> str:
        return "healthy"

    def get(self, endpoint_id: str) -> Any:
        return None

    def snapshot(self) -> Mapping[str, Any]:
        return {}

    def apply(self, stored: Mapping[str, Any]) -> int:
        return 0


def sync_limit_s(cfg: StateStoreConfig) -> float:
    """How long the sync loop may go without completing a tick before /readyz calls it stuck: a tick
    makes about ten store calls, each bounded by 4 x timeout_s."""
    return max(30.0, 10 * cfg.sync_interval_s, 60 * cfg.timeout_s)


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
        self.health = health or AllHealthy()
        # The state store's half of the health write path (the app makes it one of the sinks of
        # `health`); without one, health states are this process's own.
        self.health_feed = health_feed
        self._health_published: float | None = None
        self.clock = clock
        self.replica = replica_id or store_cfg.replica_id or default_replica_id()
        a = routing.affinity
        self.affinity = AffinityIndex(blocks=blocks_of(a), max_blocks=a.max_blocks_per_endpoint, alpha=a.reliability_alpha)
        self.latency = LatencyModel(routing.latency)
        self.profiles: dict[str, CacheProfile] = {}
        self.statics: dict[str, EndpointStatic] = {}
        for ep in catalog.endpoints:
            profile = self.profiles[ep.id] = profile_for(ep)
            self.statics[ep.id] = EndpointStatic.of(ep)
            self.affinity.configure(ep.id, profile)
            prior, explicit = prior_for(ep)
            self.latency.configure(ep.id, ep.model, prior, explicit)
        self._endpoint_ids = [ep.id for ep in catalog.endpoints]
        # Local work, and the other replicas' (pulled).
        self._inflight: dict[str, int] = {}
        self._prefill: dict[str, int] = {}
        self._remote: dict[str, tuple[int, int]] = {}
        # Rate limits: the shared usage of deployments (pulled) plus our unpushed deltas.
        self._rate_view: dict[str, tuple[int, int]] = {}
        self._rate_pending: dict[str, list[int]] = {}
        self._local_limits: dict[str, SlidingWindow] = {}
        self._limited = {rate_key("dep", ep.id): ep for ep in catalog.endpoints if ep.deployment.routing.rpm or ep.deployment.routing.tpm}
        # Unpublished changes.
        self._breaker_pending: dict[str, tuple[float | None, float, float]] = {}
        self._affinity_pending: deque[AffinityEntry] = deque(maxlen=store_cfg.max_pending_affinity or None)
        self._latency_unsynced: dict[str, dict[str, float]] = {}
        self._cursor: str | None = None
        self._sequence: dict[str, int] = {}
        # Store health.
        self.store_ok: bool | None = None
        self.last_error: str | None = None
        self._down_since: float | None = None
        self.last_sync: float | None = None
        self.resyncs = 0
        self.rate_deltas_dropped = 0  # refused by the store as values, never retried
        self._ticks = 0
        self._wake: asyncio.Event | None = None
        # Other replicas may read the store (any backend but an in-process memory store): worth
        # syncing early after changes they would want to see.
        self._peers = getattr(store, "shared", True)
        self._task: asyncio.Task[None] | None = None
        breaker.listener = self._on_breaker

    # -- the decision path: reads -------------------------------------------------------

    def snapshot(self, now: float | None = None) -> LiveSnapshot:
        return LiveSnapshot(self, self.clock() if now is None else now)

    def inflight(self, endpoint_id: str) -> int:
        remote = self._remote.get(endpoint_id)
        return self._inflight.get(endpoint_id, 0) + (remote[0] if remote else 0)

    def pending_prefill(self, endpoint_id: str) -> int:
        remote = self._remote.get(endpoint_id)
        return self._prefill.get(endpoint_id, 0) + (remote[1] if remote else 0)

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        r = endpoint.deployment.routing
        if r.rpm is None and r.tpm is None:
            return True
        key = rate_key("dep", endpoint.id)
        requests, used = self._rate_view.get(key, (0, 0))
        pending = self._rate_pending.get(key)
        if pending:
            requests, used = requests + pending[0], used + pending[1]
        return (r.rpm is None or requests + 1 <= r.rpm) and (r.tpm is None or used + tokens <= r.tpm)

    def next_sequence(self, model: str) -> int:
        n = self._sequence.get(model, 0)
        self._sequence[model] = n + 1
        return n

    # -- the request path: writes ---------------------------------------------------------

    async def admit_key(self, key_name: str | None, policy: KeyPolicy, tokens: int) -> None:
        """Count this request against its key's RPM/TPM (exact across replicas while the store
        answers); RateLimited (429) when over."""
        if policy.rpm is None and policy.tpm is None:
            return
        key = rate_key("key", key_name or "-")
        window = self.cfg.rate_window_s
        tokens = _bounded(tokens)
        result = None
        if self.store_ok is not False:
            try:
                result = await self.store.rate_acquire(key, rpm=policy.rpm, tpm=policy.tpm, tokens=tokens, window_s=window)
            except StoreRejected:
                pass  # these counts, not the store: decided on the local window
            except StoreUnavailable as exc:
                self._store_failed(exc)
        if result is None:
            result = self._local_limits.setdefault(key, SlidingWindow()).acquire(self.clock(), window, policy.rpm, policy.tpm, tokens)
            if result.allowed:
                self._add_rate(key, 1, tokens)  # replayed into the store when it returns
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
            self._add_rate(rate_key("key", key_name or "-"), 0, delta)

    def _add_rate(self, key: str, requests: int, tokens: int) -> None:
        pending = self._rate_pending.setdefault(key, [0, 0])
        pending[0] = _bounded(pending[0] + requests)
        pending[1] = _bounded(pending[1] + tokens)

    def _drop_rates(self, rates: Mapping[str, list[int]], exc: StoreUnavailable) -> None:
        self.rate_deltas_dropped += len(rates)
        log.error("state store %s refused %d rate-limit count(s); they are dropped (%s)", self.store.name, len(rates), exc)

    def started(self, endpoint: Endpoint, prefill_tokens: int, tokens: int) -> None:
        self._inflight[endpoint.id] = self._inflight.get(endpoint.id, 0) + 1
        self._prefill[endpoint.id] = self._prefill.get(endpoint.id, 0) + prefill_tokens
        if rate_key("dep", endpoint.id) in self._limited:
            self._add_rate(rate_key("dep", endpoint.id), 1, tokens)

    def prefilled(self, endpoint_id: str, prefill_tokens: int) -> None:
        self._prefill[endpoint_id] = max(0, self._prefill.get(endpoint_id, 0) - prefill_tokens)

    def ended(self, endpoint_id: str) -> None:
        left = self._inflight[endpoint_id] = max(0, self._inflight.get(endpoint_id, 0) - 1)
        if left == 0 and self._wake is not None and self._peers:
            self._wake.set()  # an idle endpoint: tell the other replicas soon, not a tick later

    def adjust_deployment_tokens(self, endpoint_id: str, delta: int) -> None:
        key = rate_key("dep", endpoint_id)
        if key in self._limited and delta:
            self._add_rate(key, 0, delta)

    def learn_affinity(
        self, endpoint_id: str, chain: list[int], predicted_blocks: int, cached_blocks: int | None
    ) -> None:
        if not chain:
            return
        self.affinity.observe(endpoint_id, chain, predicted_blocks, cached_blocks, self.clock())
        self._affinity_pending.append(AffinityEntry(self.replica, endpoint_id, "insert", tuple(chain)))

    def _on_breaker(self, endpoint_id: str, open_for: float | None, blocked_for: float) -> None:
        """Queue a breaker change for publication: the latest open/close wins, the longest block stands."""
        now = self.clock()
        old = self._breaker_pending.get(endpoint_id)
        if old is not None:
            old_open, old_blocked, at = old
            if open_for is None and old_open is not None:
                open_for = max(0.0, old_open - (now - at)) if old_open > 0 else 0.0
                if old_open > 0 and open_for == 0:
                    open_for = None
            blocked_for = max(blocked_for, old_blocked - (now - at))
        self._breaker_pending[endpoint_id] = (open_for, max(0.0, blocked_for), now)
        if self._wake is not None and self._peers:
            self._wake.set()

    # -- the sync loop --------------------------------------------------------------------

    async def sync_once(self) -> bool:
        """Push local changes, pull the others'. False (and local state kept) if the store failed."""
        came_back = self.store_ok is False
        breaker_events, self._breaker_pending = self._breaker_pending, {}
        rates, self._rate_pending = self._rate_pending, {}
        latency = self.latency.take_pending()
        affinity = list(self._affinity_pending)
        self._affinity_pending.clear()
        window = self.cfg.rate_window_s
        half_life = self.cfg.latency.half_life_s
        now = self.clock()
        feed = self.health_feed
        last = self._health_published
        if feed is not None and (came_back or last is None or now - last >= HEALTH_REPUBLISH_S):
            feed.republish(self.health.snapshot())  # the store may have lost them, or let them age out
            self._health_published = now
        try:
            if feed is not None:
                await feed.push()
            if came_back:
                # Resync: what the store may have lost while it was away.
                for endpoint_id, (open_for, blocked_for) in self.breaker.shared_view(now).items():
                    breaker_events.setdefault(endpoint_id, (open_for or None, blocked_for, now))
                for endpoint_id, delta in self._latency_unsynced.items():
                    merged = latency.setdefault(endpoint_id, {})
                    for name, value in delta.items():
                        merged[name] = merged.get(name, 0.0) + value
            for endpoint_id, (opened, blocked_for, at) in breaker_events.items():
                elapsed = now - at
                if opened is not None and opened > 0:
                    opened = max(1e-3, opened - elapsed)
                await self.store.breaker_publish(
                    endpoint_id, open_for=opened, blocked_for=max(0.0, blocked_for - elapsed) if blocked_for else 0.0
                )
            counts = {e: (self._inflight.get(e, 0), self._prefill.get(e, 0)) for e in self._endpoint_ids}
            await self.store.inflight_report(self.replica, counts, max(4 * self.store_cfg.sync_interval_s, 1.0))
            try:
                await self.store.rate_add({k: (v[0], v[1]) for k, v in rates.items()}, window)
            except StoreRejected as exc:  # retrying the same counts would fail on every tick
                self._drop_rates(rates, exc)
            latency_tick = came_back or self._ticks % self.store_cfg.latency_every == 0
            if latency_tick:
                await self.store.latency_merge(latency, half_life)
            await self.store.affinity_publish(affinity)
            if latency_tick:
                self._latency_unsynced = {}
                latency = {}
            rates, affinity, breaker_events = {}, [], {}
            await self._pull(now, latency_tick)
        except StoreUnavailable as exc:
            self._restore(breaker_events, rates, latency, affinity, now)
            self._store_failed(exc)
            self.latency.refresh()
            return False
        finally:
            self._ticks += 1
        if latency:  # not this tick's turn to push latency: keep it for the next one
            self._requeue_latency(latency)
        else:
            self.latency.refresh()  # new statistics: rebuild the predictions (once per latency tick)
        if came_back:
            self.resyncs += 1
            down = now - self._down_since if self._down_since is not None else 0.0
            log.warning(
                "state store %s is back after %.1f s; resynchronised (breakers, in-flight, latency, rate limits, affinity)",
                self.store.name,
                down,
            )
        elif self.store_ok is None:
            log.info("state store %s connected (replica %s)", self.store.name, self.replica)
        self.store_ok, self.last_error, self._down_since, self.last_sync = True, None, None, self.clock()
        return True

    def _requeue_latency(self, deltas: Mapping[str, Mapping[str, float]]) -> None:
        pending = self.latency.take_pending()
        for endpoint_id, delta in deltas.items():
            merged = dict(delta)
            for name, value in pending.get(endpoint_id, {}).items():
                merged[name] = merged.get(name, 0.0) + value
            pending[endpoint_id] = merged
        self.latency.restore_pending(pending)

    async def _pull(self, now: float, latency_tick: bool = True) -> None:
        shared = await self.store.breaker_read(self._endpoint_ids)
        remote = await self.store.inflight_totals(self.replica)
        usage = await self.store.rate_usage(list(self._limited), self.cfg.rate_window_s)
        stats = await self.store.latency_read(self._endpoint_ids, self.cfg.latency.half_life_s) if latency_tick else None
        health = await self.health_feed.pull() if self.health_feed is not None else None
        entries: list[AffinityEntry] = []
        if self._cursor is None:
            _, self._cursor = await self.store.affinity_read(None, 0)
        else:
            entries, self._cursor = await self.store.affinity_read(self._cursor, AFFINITY_READ_LIMIT)
        # Apply, skipping endpoints whose breaker changed here while we were waiting.
        now = self.clock()
        for endpoint_id in self._endpoint_ids:
            if endpoint_id in self._breaker_pending:
                continue
            view = shared.get(endpoint_id)
            self.breaker.merge_shared(endpoint_id, view.open_for if view else 0.0, view.blocked_for if view else 0.0, now)
        self._remote = remote
        self._rate_view = usage
        if health:
            self.health.apply(health)
        if stats is not None:
            self.latency.adopt(stats, now)
        for entry in entries:
            if entry.replica == self.replica:
                continue
            if entry.op == "insert":
                self.affinity.insert(entry.endpoint, list(entry.blocks), now)
            elif entry.op == "truncate":
                self.affinity.truncate(entry.endpoint, entry.blocks)

    def _restore(
        self,
        breaker_events: Mapping[str, tuple[float | None, float, float]],
        rates: Mapping[str, list[int]],
        latency: Mapping[str, Mapping[str, float]],
        affinity: list[AffinityEntry],
        now: float,
    ) -> None:
        for endpoint_id, event in breaker_events.items():
            self._breaker_pending.setdefault(endpoint_id, event)
        for key, (requests, tokens) in rates.items():
            self._add_rate(key, requests, tokens)
        # Unpushed latency stays visible locally, and is replayed when the store returns.
        self.latency.fold(latency, now)
        for endpoint_id, delta in latency.items():
            merged = self._latency_unsynced.setdefault(endpoint_id, {})
            for name, value in delta.items():
                merged[name] = merged.get(name, 0.0) + value
        self._affinity_pending.extendleft(reversed(affinity))

    def _store_failed(self, exc: StoreUnavailable) -> None:
        if self.store_ok is not False:
            log.warning("state store %s is unavailable (%s); serving on local state", self.store.name, exc)
            self._down_since = self.clock()
            # The other replicas' load and rate usage would only go stale: count on our own.
            self._remote = {}
            self._rate_view = {}
        self.store_ok = False
        self.last_error = str(exc)

    async def run(self) -> None:
        """Sync every interval (sooner after a wake-up). A store outage is handled in `sync_once`;
        anything else it raises is logged and counted, and the next tick still runs."""
        self._wake = asyncio.Event()
        await run_forever(self.sync_once, self._pause, self.beat)

    async def _pause(self) -> None:
        assert self._wake is not None
        interval = self.store_cfg.sync_interval_s
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that
            # arrives with the wake-up, and the loop would never stop (a hung shutdown).
            async with asyncio.timeout(interval):
                await self._wake.wait()
            await asyncio.sleep(min(interval, WAKE_GAP_S))  # batch what else changes meanwhile
        except TimeoutError:
            pass
        self._wake.clear()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="state-sync")

    async def aclose(self, timeout: float | None = None) -> None:
        """Stop the loop, push what is left (within `timeout`, default 8 x timeout_s), close the store."""
        await cancel_and_wait(self._task)
        self._task = None
        try:
            await asyncio.wait_for(self.sync_once(), self.store_cfg.timeout_s * 8 if timeout is None else timeout)
        except TimeoutError:
            log.warning("state store %s: the last push timed out at shutdown", self.store.name)
        except Exception:
            log.exception("state store %s: the last push failed at shutdown", self.store.name)
        await self.store.aclose()

    def status(self) -> dict[str, Any]:
        now = self.clock()
        out: dict[str, Any] = {"backend": self.store.name, "replica": self.replica, "ok": self.store_ok is not False}
        if self.store_ok is False:
            out["error"] = self.last_error
            out["down_for_s"] = round(now - (self._down_since or now), 3)
            out["serving_on"] = "local state"
        if self.last_sync is not None:
            out["last_sync_age_s"] = round(now - self.last_sync, 3)
        out["resyncs"] = self.resyncs
        if self.health_feed is not None and self.health_feed.pending:
            out["health_states_waiting"] = self.health_feed.pending
        if self.rate_deltas_dropped:
            out["rate_deltas_dropped"] = self.rate_deltas_dropped
        return out


class LiveSnapshot:
    """`Snapshot` over the local mirrors at one instant. No I/O."""

    __slots__ = ("_s", "now")

    def __init__(self, shared: SharedState, now: float) -> None:
        self._s = shared
        self.now = now

    def ready(self, endpoint: Endpoint) -> bool:
        return endpoint.is_ready()

    def static(self, endpoint: Endpoint) -> EndpointStatic:
        static = self._s.statics.get(endpoint.id)
        if static is None:
            static = self._s.statics[endpoint.id] = EndpointStatic.of(endpoint)
        return static

    def health(self, endpoint_id: str) -> str:
        return self._s.health.state(endpoint_id)

    def quality(self, endpoint_id: str) -> float:
        entry = self._s.health.get(endpoint_id)
        score = getattr(entry, "score", None)
        if score is None:
            return 1.0
        return min(1.0, max(0.05, float(score)))

    def blocked(self, endpoint_id: str) -> str | None:
        breaker = self._s.breaker
        if endpoint_id not in breaker._endpoints or breaker.allows(endpoint_id, self.now):
            return None
        return "retry_after" if self.now < breaker.blocked_until(endpoint_id) else "breaker_open"

    def rate_headroom(self, endpoint: Endpoint, tokens: int) -> bool:
        return self._s.rate_headroom(endpoint, tokens)

    def inflight(self, endpoint_id: str) -> float:
        s = self._s
        remote = s._remote.get(endpoint_id)
        return s._inflight.get(endpoint_id, 0) + (remote[0] if remote else 0)

    def pending_prefill(self, endpoint_id: str) -> float:
        s = self._s
        remote = s._remote.get(endpoint_id)
        return s._prefill.get(endpoint_id, 0) + (remote[1] if remote else 0)

    def reported_load(self, endpoint: Endpoint) -> ReportedLoad | None:
        return endpoint.reported_load()

    def latency(self, endpoint_id: str) -> EndpointLatency:
        summary = self._s.latency._summary.get(endpoint_id)
        return summary if summary is not None else self._s.latency.summary(endpoint_id)

    def match(self, endpoint_id: str, chain: list[int]) -> int:
        return self._s.affinity.match(endpoint_id, chain, self.now)

    def reliability(self, endpoint_id: str) -> float:
        return self._s.affinity.reliability(endpoint_id)

    def residence(self, endpoint_id: str) -> float | None:
        return self._s.affinity.residence(endpoint_id, self.now)

    def profile(self, endpoint: Endpoint) -> CacheProfile:
        profile = self._s.profiles.get(endpoint.id)
        if profile is None:
            profile = self._s.profiles[endpoint.id] = profile_for(endpoint)
        return profile

    def sequence(self, model: str) -> int:
        return self._s._sequence.get(model, 0)
