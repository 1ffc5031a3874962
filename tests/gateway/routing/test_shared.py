"""SharedState: two replicas over one store see each other's breakers, load, latency, rate usage
and affinity after a sync; a store outage leaves each on its local state, then resyncs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.catalog import Catalog
from gateway.routing.affinity import CacheProfile
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.settings import BreakerConfig, KeyPolicy, RoutingConfig
from gateway.routing.shared import SharedState
from gateway.state_store.base import StoreRejected, StoreUnavailable
from gateway.state_store.config import StateStoreConfig
from gateway.state_store.memory import MemoryStore
from kernel.errors import RateLimited
from tests.fakes.clock import FakeClock
from tests.gateway.routing.helpers import endpoint, features, local

A, B = local("l-0"), local("l-1")
LIMITED = endpoint("cloud/m", routing={"rpm": 3})
CATALOG = Catalog([A, B, LIMITED], created=0)
BREAKER = BreakerConfig(min_requests=1, failure_rate=0.5, open_seconds=30)
LONG = {"model": "m", "messages": [{"role": "user", "content": "investigate the failing build " * 60}]}


class FlakyStore:
    """A MemoryStore that can be taken away: every call raises StoreUnavailable while `down`."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.down = False
        self.name = "flaky"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StoreUnavailable("flaky store is down")
            return await attr(*args, **kwargs)

        return call


def replica(store: Any, clock: FakeClock, name: str, latency_every: int = 1) -> SharedState:
    cfg = StateStoreConfig(latency_every=latency_every)
    return SharedState(RoutingConfig(), cfg, CATALOG, store, CircuitBreaker(BREAKER), clock=clock, replica_id=name)


@pytest.fixture
def pair() -> tuple[SharedState, SharedState, FakeClock]:
    clock = FakeClock()
    store = MemoryStore(clock)
    return replica(store, clock, "r1"), replica(store, clock, "r2"), clock


async def sync(*replicas: SharedState) -> None:
    for r in replicas:
        assert await r.sync_once()


async def test_breaker_opened_by_one_is_seen_by_the_other(pair: Any) -> None:
    r1, r2, clock = pair
    await sync(r1, r2)
    r1.breaker.record("l-0", False, clock())
    assert r1.breaker.state("l-0", clock()) == "open"
    assert r2.breaker.allows("l-0", clock())
    await sync(r1, r2)
    assert r2.breaker.state("l-0", clock()) == "open"
    assert r2.snapshot().blocked("l-0") == "breaker_open"
    # Both go half-open when the open period ends.
    clock.advance(30)
    assert r2.breaker.state("l-0", clock()) == "half_open"


async def test_a_trial_success_closes_it_everywhere(pair: Any) -> None:
    r1, r2, clock = pair
    r1.breaker.record("l-0", False, clock())
    await sync(r1, r2)
    clock.advance(30)
    r1.breaker.acquire("l-0", clock())
    r1.breaker.record("l-0", True, clock())
    await sync(r1, r2)
    assert r2.breaker.state("l-0", clock()) in ("closed", "half_open")
    # A close that comes while the other still has most of its open period left is adopted.
    r1.breaker.record("l-1", False, clock())
    await sync(r1, r2)
    assert r2.breaker.state("l-1", clock()) == "open"
    r1.breaker.merge_shared("l-1", 0.0, 0.0, clock())  # e.g. an operator reset on r1
    r1._on_breaker("l-1", 0.0, 0.0)
    await sync(r1, r2)
    assert r2.breaker.state("l-1", clock()) == "closed"


async def test_retry_after_block_is_shared(pair: Any) -> None:
    r1, r2, clock = pair
    r1.breaker.record("l-1", False, clock(), retry_after=20)
    await sync(r1, r2)
    assert r2.snapshot().blocked("l-1") == "retry_after"
    clock.advance(21)  # the block is over; the failure also tripped the breaker (min_requests=1)
    assert r2.snapshot().blocked("l-1") == "breaker_open"
    clock.advance(10)
    assert r2.snapshot().blocked("l-1") is None


async def test_inflight_of_the_other_replica_counts(pair: Any) -> None:
    r1, r2, _ = pair
    r1.started(A, prefill_tokens=500, tokens=600)
    r1.started(A, prefill_tokens=300, tokens=400)
    await sync(r1, r2)
    assert r2.inflight("l-0") == 2 and r2.pending_prefill("l-0") == 800
    r1.prefilled("l-0", 500)
    r1.ended("l-0")
    await sync(r1, r2)
    assert r2.inflight("l-0") == 1 and r2.pending_prefill("l-0") == 300
    assert r1.inflight("l-0") == 1  # its own, not doubled


async def test_affinity_learned_by_one_is_used_by_the_other(pair: Any) -> None:
    r1, r2, clock = pair
    f = features(LONG)
    await sync(r1, r2)
    r1.learn_affinity("l-1", f.chain, 0, None)
    await sync(r1, r2)
    assert r2.affinity.match("l-1", f.chain, clock()) == len(f.chain)
    assert r2.affinity.match("l-0", f.chain, clock()) == 0


async def test_latency_statistics_merge(pair: Any) -> None:
    r1, r2, _ = pair
    for _ in range(20):
        r1.latency.observe("l-0", 100, 0.05, 40.0)
        r2.latency.observe("l-1", 100, 0.50, 10.0)
    await sync(r1, r2, r1)
    for r in (r1, r2):
        assert r.latency.summary("l-0").ttft(100) < r.latency.summary("l-1").ttft(100)
        assert r.latency.summary("l-0").samples == pytest.approx(20)


async def test_latency_syncs_every_few_ticks() -> None:
    clock = FakeClock()
    store = MemoryStore(clock)
    r1, r2 = replica(store, clock, "r1", latency_every=3), replica(store, clock, "r2", latency_every=3)
    await sync(r1, r2)  # tick 0 of both: a latency tick
    r1.latency.observe("l-0", 100, 0.05, 40.0)
    await sync(r1, r2)  # tick 1: not pushed, but kept
    assert "l-0" not in await store.latency_read(["l-0"], 300.0)
    assert r1.latency.raw("l-0")["fw"] == 1.0
    await sync(r1, r2, r1, r2)  # ticks 2 and 3: pushed by r1 on its tick 3, pulled by r2 on its tick 3
    assert (await store.latency_read(["l-0"], 300.0))["l-0"]["fw"] == pytest.approx(1.0)
    assert r2.latency.raw("l-0")["fw"] == pytest.approx(1.0) and r1.latency.raw("l-0")["fw"] == pytest.approx(1.0)


async def test_deployment_rate_usage_is_shared(pair: Any) -> None:
    r1, r2, _ = pair
    for _ in range(3):
        r1.started(LIMITED, 0, 10)
    assert not r1.rate_headroom(LIMITED, 10)
    await sync(r1, r2)
    assert not r2.rate_headroom(LIMITED, 10)
    assert r2.snapshot().rate_headroom(A, 10)


async def test_key_limit_is_exact_across_replicas(pair: Any) -> None:
    r1, r2, _ = pair
    policy = KeyPolicy(rpm=4)
    admitted = 0
    for i in range(10):
        try:
            await (r1 if i % 2 else r2).admit_key("team", policy, 10)
            admitted += 1
        except RateLimited as exc:
            assert exc.status_code == 429 and int(exc.headers["retry-after"]) >= 1
            assert "4 requests per 60 s" in exc.message
    assert admitted == 4


async def test_store_outage_serves_locally_and_resyncs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    clock = FakeClock()
    store = FlakyStore(MemoryStore(clock))
    r1, r2 = replica(store, clock, "r1"), replica(store, clock, "r2")
    await sync(r1, r2)
    store.down = True
    assert not await r1.sync_once()
    assert r1.status()["ok"] is False and r1.status()["serving_on"] == "local state"
    assert "unavailable" in caplog.text
    # Local state keeps working: the breaker trips, affinity learns, limits fall back to local.
    r1.breaker.record("l-0", False, clock())
    assert r1.snapshot().blocked("l-0") == "breaker_open"
    f = features(LONG)
    r1.learn_affinity("l-1", f.chain, 0, None)
    r1.latency.observe("l-1", 100, 0.2, 20.0)
    for _ in range(2):
        await r1.admit_key("team", KeyPolicy(rpm=2), 1)
    with pytest.raises(RateLimited):
        await r1.admit_key("team", KeyPolicy(rpm=2), 1)
    assert not await r1.sync_once()  # still down: nothing lost
    r1.latency.refresh()
    assert r1.latency.summary("l-1").samples == pytest.approx(1)
    # The store returns (empty, like a restarted Redis): r1 republishes, r2 picks it up.
    store.inner = MemoryStore(clock)
    store.down = False
    r2.sync._cursor = None
    await sync(r2, r1, r2)
    assert r1.status()["ok"] is True and r1.resyncs == 1
    assert "is back" in caplog.text
    assert r2.breaker.state("l-0", clock()) == "open"
    assert r2.affinity.match("l-1", f.chain, clock()) == len(f.chain)
    assert r2.latency.summary("l-1").samples == pytest.approx(1)
    # The two requests admitted during the outage were replayed into the shared window.
    assert (await store.inner.rate_usage(["key:team"], 60))["key:team"][0] == 2


def test_snapshot_reads_cache_residence_from_the_index(pair: Any) -> None:
    r1, _, clock = pair
    r1.affinity.configure("l-0", CacheProfile(ttl_s=3600.0, capacity_tokens=256))  # smaller than LONG
    f = features(LONG)
    r1.learn_affinity("l-0", f.chain, 0, None)
    r1.learn_affinity("l-1", f.chain, 0, None)
    clock.advance(7.0)
    snap = r1.snapshot()
    assert snap.residence("l-0") == pytest.approx(7.0)  # evicting: its oldest block is 7 s old
    assert snap.residence("l-1") is None  # room left


async def test_a_huge_retry_after_reaches_the_store_clamped(pair: Any) -> None:
    r1, r2, clock = pair
    r1.breaker.record("l-1", False, clock(), retry_after=1e306)
    await sync(r1, r2)  # the push does not overflow converting it to milliseconds
    assert r2.snapshot().blocked("l-1") == "retry_after"
    assert r2.breaker.blocked_until("l-1") == pytest.approx(clock() + 300)


class RefusingStore(FlakyStore):
    """Answers everything, but refuses every rate count as out of range (what Redis does past 1e17)."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.rate_adds = 0

    async def rate_add(self, deltas: Any, window_s: float) -> None:
        if not deltas:
            return
        self.rate_adds += 1
        raise StoreRejected("ERR value is not an integer or out of range")


async def test_a_rate_count_the_store_refuses_is_dropped_and_counted_not_retried(caplog: Any) -> None:
    clock = FakeClock()
    store = RefusingStore(MemoryStore(clock))
    r = replica(store, clock, "r1")
    r.adjust_deployment_tokens("cloud/m", 10**17)
    with caplog.at_level(logging.ERROR, logger="gateway.state"):
        assert await r.sync_once()  # the store answered: it is not "unavailable"
    assert r.store_ok and r.status()["ok"] and r.status()["rate_deltas_dropped"] == 1
    assert "refused 1 rate-limit count" in caplog.text
    assert await r.sync_once()
    assert store.rate_adds == 1  # nothing left to push: the refused count was not requeued


def test_pending_rate_counts_stay_inside_the_stores_range(pair: Any) -> None:
    r1, _, _ = pair
    for _ in range(200):
        r1.adjust_deployment_tokens("cloud/m", 10**17)
    assert 0 < r1.rates.pending["dep:cloud/m"][1] < 10**17


async def test_an_admission_the_store_refuses_is_decided_locally_without_marking_it_down(pair: Any) -> None:
    clock = FakeClock()
    store = RefusingStore(MemoryStore(clock))

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StoreRejected("ERR value is not an integer or out of range")

    store.rate_acquire = refuse  # type: ignore[method-assign]
    r = replica(store, clock, "r1")
    await r.admit_key("team", KeyPolicy(rpm=10), 10**17)
    assert r.store_ok is not False


async def test_the_sync_loop_survives_an_unexpected_exception(caplog: Any) -> None:
    import asyncio

    clock = FakeClock()
    store = FlakyStore(MemoryStore(clock))
    calls = 0
    real_report = store.inner.inflight_report

    async def broken_once(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OverflowError("cannot convert float infinity to integer")  # not a StoreUnavailable
        await real_report(*args, **kwargs)

    store.inflight_report = broken_once  # type: ignore[attr-defined]
    r = SharedState(
        RoutingConfig(), StateStoreConfig(sync_interval_s=0.01), CATALOG, store, CircuitBreaker(BREAKER), clock=clock, replica_id="r"
    )
    with caplog.at_level(logging.ERROR, logger="gateway.state"):
        r.start()
        async with asyncio.timeout(10):
            while r.last_sync is None:
                await asyncio.sleep(0.01)
        assert r.sync._task is not None and not r.sync._task.done()
        await r.aclose()
    assert r.beat.failures == 1 and r.beat.last_success is not None
    assert "OverflowError" in caplog.text
