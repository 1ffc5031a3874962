"""The sync loop: every `sync_interval_s` (sooner after a wake-up) it pushes what this replica
changed to the StateStore and pulls what the others changed, into routing's local mirrors.

When the store fails, local state is kept (and what could not be pushed is queued again), the
outage is logged once and reported in `status`; when the store answers again, this replica's
breaker states, in-flight counts, unsynced latency and rate deltas and buffered affinity entries
are published again (resync). Health states travel the same way (`gateway.routing.health_feed`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway.routing.affinity import AffinityIndex
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.health_feed import HealthFeed
from gateway.routing.health_view import HealthView
from gateway.routing.latency import LatencyModel
from gateway.routing.load import Load
from gateway.routing.outbox import BreakerEvent, Outbox
from gateway.routing.rates import RateCounts
from gateway.routing.settings import RoutingConfig
from gateway.state_store.base import AffinityEntry, StateStore, StoreRejected, StoreUnavailable
from gateway.state_store.config import StateStoreConfig
from kernel.tasks import Heartbeat, cancel_and_wait, run_forever

log = logging.getLogger("gateway.state")

AFFINITY_READ_LIMIT = 5000
# Every local health state is published again this often, so the store's copy never expires
# (`HEALTH_TTL_S`) while a replica still holds it.
HEALTH_REPUBLISH_S = 86_400.0
# After a wake-up (a breaker change, an endpoint going idle), sync this soon rather than at once
# (and so at most this often beyond the regular interval).
WAKE_GAP_S = 0.05

Deltas = dict[str, dict[str, float]]


def sync_limit_s(cfg: StateStoreConfig) -> float:
    """How long the sync loop may go without completing a tick before /readyz calls it stuck: a tick
    makes about ten store calls, each bounded by 4 x timeout_s."""
    return max(30.0, 10 * cfg.sync_interval_s, 60 * cfg.timeout_s)


def _add_into(into: Deltas, deltas: Mapping[str, Mapping[str, float]]) -> None:
    for endpoint_id, delta in deltas.items():
        merged = into.setdefault(endpoint_id, {})
        for name, value in delta.items():
            merged[name] = merged.get(name, 0.0) + value


class StoreSync:
    def __init__(
        self,
        routing: RoutingConfig,
        store_cfg: StateStoreConfig,
        store: StateStore,
        *,
        endpoint_ids: list[str],
        replica: str,
        breaker: CircuitBreaker,
        latency: LatencyModel,
        affinity: AffinityIndex,
        health: HealthView,
        health_feed: HealthFeed | None,
        load: Load,
        rates: RateCounts,
        outbox: Outbox,
        clock: Callable[[], float],
        beat: Heartbeat,
    ) -> None:
        self.cfg = routing
        self.store_cfg = store_cfg
        self.store = store
        self.replica = replica
        self.beat = beat
        self._endpoint_ids = endpoint_ids
        self._breaker = breaker
        self._latency = latency
        self._affinity = affinity
        self._health = health
        self._feed = health_feed
        self._load = load
        self._rates = rates
        self._outbox = outbox
        self._clock = clock
        self._health_published: float | None = None
        self._latency_unsynced: Deltas = {}
        self._cursor: str | None = None
        # Store health.
        self.store_ok: bool | None = None
        self.last_error: str | None = None
        self._down_since: float | None = None
        self.last_sync: float | None = None
        self.resyncs = 0
        self.ticks = 0
        self._wake: asyncio.Event | None = None
        # Other replicas may read the store (any backend but an in-process memory store): worth
        # syncing early after changes they would want to see.
        self._peers = getattr(store, "shared", True)
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Sync soon: a change the other replicas would want to see (none to tell: no-op)."""
        if self._wake is not None and self._peers:
            self._wake.set()

    # -- one tick -------------------------------------------------------------------------

    async def sync_once(self) -> bool:
        """Push local changes, pull the others'. False (and local state kept) if the store failed."""
        came_back = self.store_ok is False
        breaker_events, affinity = self._outbox.take()
        rates = self._rates.take()
        latency = self._latency.take_pending()
        window = self.cfg.rate_window_s
        half_life = self.cfg.latency.half_life_s
        now = self._clock()
        feed = self._feed
        last = self._health_published
        if feed is not None and (came_back or last is None or now - last >= HEALTH_REPUBLISH_S):
            feed.republish(self._health.snapshot())  # the store may have lost them, or let them age out
            self._health_published = now
        try:
            if feed is not None:
                await feed.push()
            if came_back:
                # Resync: what the store may have lost while it was away.
                for endpoint_id, (open_for, blocked_for) in self._breaker.shared_view(now).items():
                    breaker_events.setdefault(endpoint_id, (open_for or None, blocked_for, now))
                _add_into(latency, self._latency_unsynced)
            for endpoint_id, (opened, blocked_for, at) in breaker_events.items():
                elapsed = now - at
                if opened is not None and opened > 0:
                    opened = max(1e-3, opened - elapsed)
                await self.store.breaker_publish(
                    endpoint_id, open_for=opened, blocked_for=max(0.0, blocked_for - elapsed) if blocked_for else 0.0
                )
            counts = self._load.own(self._endpoint_ids)
            await self.store.inflight_report(self.replica, counts, max(4 * self.store_cfg.sync_interval_s, 1.0))
            try:
                await self.store.rate_add({k: (v[0], v[1]) for k, v in rates.items()}, window)
            except StoreRejected as exc:  # retrying the same counts would fail on every tick
                self._drop_rates(rates, exc)
            latency_tick = came_back or self.ticks % self.store_cfg.latency_every == 0
            if latency_tick:
                await self.store.latency_merge(latency, half_life)
            await self.store.affinity_publish(affinity)
            if latency_tick:
                self._latency_unsynced = {}
                latency = {}
            rates, affinity, breaker_events = {}, [], {}
            await self.pull(now, latency_tick)
        except StoreUnavailable as exc:
            self._restore(breaker_events, rates, latency, affinity, now)
            self.store_failed(exc)
            self._latency.refresh()
            return False
        finally:
            self.ticks += 1
        if latency:  # not this tick's turn to push latency: keep it for the next one
            self._requeue_latency(latency)
        else:
            self._latency.refresh()  # new statistics: rebuild the predictions (once per latency tick)
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
        self.store_ok, self.last_error, self._down_since, self.last_sync = True, None, None, self._clock()
        return True

    def _drop_rates(self, rates: Mapping[str, list[int]], exc: StoreUnavailable) -> None:
        self._rates.dropped += len(rates)
        log.error(
            "state store %s refused %d rate-limit count(s); they are dropped (%s)", self.store.name, len(rates), exc
        )

    def _requeue_latency(self, deltas: Mapping[str, Mapping[str, float]]) -> None:
        pending = self._latency.take_pending()
        for endpoint_id, delta in deltas.items():
            merged = dict(delta)
            for name, value in pending.get(endpoint_id, {}).items():
                merged[name] = merged.get(name, 0.0) + value
            pending[endpoint_id] = merged
        self._latency.restore_pending(pending)

    async def pull(self, now: float, latency_tick: bool = True) -> None:
        """The other replicas' state, from the store into the local mirrors."""
        store = self.store
        shared = await store.breaker_read(self._endpoint_ids)
        remote = await store.inflight_totals(self.replica)
        usage = await store.rate_usage(list(self._rates.limited), self.cfg.rate_window_s)
        stats = await store.latency_read(self._endpoint_ids, self.cfg.latency.half_life_s) if latency_tick else None
        health = await self._feed.pull() if self._feed is not None else None
        entries: list[AffinityEntry] = []
        if self._cursor is None:
            _, self._cursor = await store.affinity_read(None, 0)
        else:
            entries, self._cursor = await store.affinity_read(self._cursor, AFFINITY_READ_LIMIT)
        # Apply, skipping endpoints whose breaker changed here while we were waiting.
        now = self._clock()
        pending = self._outbox.breaker
        for endpoint_id in self._endpoint_ids:
            if endpoint_id in pending:
                continue
            view = shared.get(endpoint_id)
            self._breaker.merge_shared(
                endpoint_id, view.open_for if view else 0.0, view.blocked_for if view else 0.0, now
            )
        self._load.remote = remote
        self._rates.view = usage
        if health:
            self._health.apply(health)
        if stats is not None:
            self._latency.adopt(stats, now)
        for entry in entries:
            if entry.replica == self.replica:
                continue
            if entry.op == "insert":
                self._affinity.insert(entry.endpoint, list(entry.blocks), now)
            elif entry.op == "truncate":
                self._affinity.truncate(entry.endpoint, entry.blocks)

    def _restore(
        self,
        breaker_events: Mapping[str, BreakerEvent],
        rates: Mapping[str, list[int]],
        latency: Mapping[str, Mapping[str, float]],
        affinity: list[AffinityEntry],
        now: float,
    ) -> None:
        self._outbox.restore(breaker_events, affinity)
        self._rates.restore(rates)
        # Unpushed latency stays visible locally, and is replayed when the store returns.
        self._latency.fold(latency, now)
        _add_into(self._latency_unsynced, latency)

    def store_failed(self, exc: StoreUnavailable) -> None:
        if self.store_ok is not False:
            log.warning("state store %s is unavailable (%s); serving on local state", self.store.name, exc)
            self._down_since = self._clock()
            # The other replicas' load and rate usage would only go stale: count on our own.
            self._load.remote = {}
            self._rates.view = {}
        self.store_ok = False
        self.last_error = str(exc)

    # -- the loop -------------------------------------------------------------------------

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
        now = self._clock()
        out: dict[str, Any] = {"backend": self.store.name, "replica": self.replica, "ok": self.store_ok is not False}
        if self.store_ok is False:
            out["error"] = self.last_error
            out["down_for_s"] = round(now - (self._down_since or now), 3)
            out["serving_on"] = "local state"
        if self.last_sync is not None:
            out["last_sync_age_s"] = round(now - self.last_sync, 3)
        out["resyncs"] = self.resyncs
        if self._feed is not None and self._feed.pending:
            out["health_states_waiting"] = self._feed.pending
        if self._rates.dropped:
            out["rate_deltas_dropped"] = self._rates.dropped
        return out
