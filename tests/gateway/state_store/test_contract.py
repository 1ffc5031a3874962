"""One contract, two backends: every test runs against `MemoryStore` (a fake clock) and
`RedisStore` on the real Redis server (real time, short durations, a unique key prefix)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from gateway.state_store.base import AffinityEntry, StateStore
from gateway.state_store.memory import MemoryStore
from gateway.state_store.redis import RedisStore
from gateway.state_store.window import BUCKETS
from tests.fakes.clock import FakeClock
from tests.gateway.state_store.redis_helpers import (
    REDIS_URL,
    delete_prefix,
    keys_with_ttl,
    redis_available,
    unique_prefix,
)
from tests.services import require


@dataclass
class Backend:
    store: StateStore
    advance: Callable[[float], Awaitable[None]]


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        clock = FakeClock(start=5000.0)

        async def advance(seconds: float) -> None:
            clock.advance(seconds)

        store = MemoryStore(clock)
        yield Backend(store, advance)
        return
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    redis_store = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        yield Backend(redis_store, asyncio.sleep)
    finally:
        await redis_store.aclose()
        delete_prefix(prefix)


async def test_ping(backend: Backend) -> None:
    await backend.store.ping()


# -- rate limits ----------------------------------------------------------------------------


async def test_rpm_admits_exactly_the_quota(backend: Backend) -> None:
    results = [await backend.store.rate_acquire("key:a", rpm=3, tpm=None, tokens=10, window_s=60) for _ in range(5)]
    assert [r.allowed for r in results] == [True, True, True, False, False]
    assert [r.requests for r in results[:3]] == [1, 2, 3]
    assert results[3].requests == 3 and results[3].tokens == 30
    assert 0 < results[3].retry_after <= 60


async def test_tpm_counts_tokens(backend: Backend) -> None:
    store = backend.store
    assert (await store.rate_acquire("key:t", rpm=None, tpm=100, tokens=60, window_s=60)).allowed
    refused = await store.rate_acquire("key:t", rpm=None, tpm=100, tokens=50, window_s=60)
    assert not refused.allowed and refused.tokens == 60
    assert (await store.rate_acquire("key:t", rpm=None, tpm=100, tokens=40, window_s=60)).allowed
    # Bigger than the whole budget: never fits.
    assert not (await store.rate_acquire("key:other", rpm=None, tpm=100, tokens=101, window_s=60)).allowed


async def test_concurrent_acquires_are_atomic(backend: Backend) -> None:
    results = await asyncio.gather(
        *[backend.store.rate_acquire("key:c", rpm=10, tpm=None, tokens=1, window_s=60) for _ in range(40)]
    )
    assert sum(r.allowed for r in results) == 10


async def test_window_slides(backend: Backend) -> None:
    window = 1.2  # buckets of 0.1 s
    store = backend.store
    assert (await store.rate_acquire("key:s", rpm=1, tpm=None, tokens=0, window_s=window)).allowed
    refused = await store.rate_acquire("key:s", rpm=1, tpm=None, tokens=0, window_s=window)
    assert not refused.allowed and 0 < refused.retry_after <= window + window / BUCKETS
    await backend.advance(window + 2 * window / BUCKETS)
    assert (await store.rate_acquire("key:s", rpm=1, tpm=None, tokens=0, window_s=window)).allowed


async def test_rate_add_and_usage(backend: Backend) -> None:
    store = backend.store
    await store.rate_add({"dep:x": (2, 300), "dep:y": (1, 10)}, 60)
    await store.rate_add({"dep:x": (0, -100)}, 60)
    usage = await store.rate_usage(["dep:x", "dep:y", "dep:none"], 60)
    assert usage == {"dep:x": (2, 200), "dep:y": (1, 10), "dep:none": (0, 0)}
    # What rate_add counted limits rate_acquire on the same key.
    assert not (await store.rate_acquire("dep:x", rpm=2, tpm=None, tokens=0, window_s=60)).allowed


# -- breaker --------------------------------------------------------------------------------


async def test_breaker_open_expires(backend: Backend) -> None:
    store = backend.store
    await store.breaker_publish("a/m", open_for=0.3, blocked_for=0)
    view = await store.breaker_read(["a/m", "b/m"])
    assert set(view) == {"a/m"} and 0 < view["a/m"].open_for <= 0.3 + 1e-6 and view["a/m"].blocked_for == 0
    await backend.advance(0.35)
    assert await store.breaker_read(["a/m"]) == {}


async def test_breaker_close_and_leave(backend: Backend) -> None:
    store = backend.store
    await store.breaker_publish("a/m", open_for=30, blocked_for=0)
    await store.breaker_publish("a/m", open_for=None, blocked_for=5)  # a block alone keeps it open
    view = (await store.breaker_read(["a/m"]))["a/m"]
    assert view.open_for > 29 and 4 < view.blocked_for <= 5
    await store.breaker_publish("a/m", open_for=0, blocked_for=0)  # closed by a trial success
    view = (await store.breaker_read(["a/m"]))["a/m"]
    assert view.open_for == 0 and view.blocked_for > 4


async def test_longer_block_stands(backend: Backend) -> None:
    store = backend.store
    await store.breaker_publish("a/m", open_for=None, blocked_for=20)
    await store.breaker_publish("a/m", open_for=None, blocked_for=2)
    assert (await store.breaker_read(["a/m"]))["a/m"].blocked_for > 19


# -- in-flight ------------------------------------------------------------------------------


async def test_inflight_totals_sum_other_replicas(backend: Backend) -> None:
    store = backend.store
    await store.inflight_report("r1", {"a/m": (2, 100), "b/m": (0, 0)}, ttl_s=5)
    await store.inflight_report("r2", {"a/m": (1, 50), "b/m": (3, 0)}, ttl_s=5)
    assert await store.inflight_totals("r3") == {"a/m": (3, 150), "b/m": (3, 0)}
    assert await store.inflight_totals("r1") == {"a/m": (1, 50), "b/m": (3, 0)}
    await store.inflight_report("r2", {"a/m": (0, 0), "b/m": (1, 0)}, ttl_s=5)  # replaces
    assert await store.inflight_totals("r1") == {"a/m": (0, 0), "b/m": (1, 0)}


async def test_inflight_report_expires_with_its_replica(backend: Backend) -> None:
    store = backend.store
    await store.inflight_report("gone", {"a/m": (4, 0)}, ttl_s=0.2)
    await store.inflight_report("alive", {"a/m": (1, 0)}, ttl_s=30)
    await backend.advance(0.3)
    assert await store.inflight_totals("me") == {"a/m": (1, 0)}


# -- latency --------------------------------------------------------------------------------


async def test_latency_merge_adds_and_decays(backend: Backend) -> None:
    store = backend.store
    await store.latency_merge({"a/m": {"n0": 1.0, "s0": 0.5}}, half_life_s=1.0)
    await store.latency_merge({"a/m": {"n0": 1.0, "s0": 0.3}, "b/m": {"dw": 2.0}}, half_life_s=1.0)
    got = await store.latency_read(["a/m", "b/m", "c/m"], half_life_s=1.0)
    assert set(got) == {"a/m", "b/m"}
    assert got["a/m"]["n0"] == pytest.approx(2.0, rel=0.05)
    assert got["a/m"]["s0"] == pytest.approx(0.8, rel=0.05)
    await backend.advance(1.0)
    later = await store.latency_read(["a/m"], half_life_s=1.0)
    assert later["a/m"]["n0"] == pytest.approx(1.0, rel=0.1)  # one half-life: halved
    # A merge decays what was there before adding.
    await store.latency_merge({"a/m": {"n0": 1.0}}, half_life_s=1.0)
    assert (await store.latency_read(["a/m"], half_life_s=1.0))["a/m"]["n0"] == pytest.approx(2.0, rel=0.1)


# -- affinity log ---------------------------------------------------------------------------


async def test_affinity_log_from_the_cursor_on(backend: Backend) -> None:
    store = backend.store
    await store.affinity_publish([AffinityEntry("r0", "a/m", "insert", (1, 2))])
    entries, cursor = await store.affinity_read(None, 100)
    assert entries == []  # None: only what comes from now on
    big = (2**64 - 1, 2**63, 0, 12345678901234567890)
    published = [
        AffinityEntry("r1", "a/m", "insert", big),
        AffinityEntry("r2", "b/m", "truncate", (7,)),
        AffinityEntry("r1", "c/m", "insert", tuple(range(300))),
    ]
    await store.affinity_publish(published)
    first, cursor = await store.affinity_read(cursor, 2)
    rest, cursor = await store.affinity_read(cursor, 100)
    assert first + rest == published
    assert await store.affinity_read(cursor, 100) == ([], cursor)


# -- Redis only -----------------------------------------------------------------------------


@pytest.fixture
async def redis_store() -> AsyncIterator[tuple[RedisStore, str]]:
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    store = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        yield store, prefix
    finally:
        await store.aclose()
        delete_prefix(prefix)


async def test_every_redis_key_expires(redis_store: tuple[RedisStore, str]) -> None:
    store, prefix = redis_store
    await store.rate_acquire("key:a", rpm=5, tpm=None, tokens=1, window_s=60)
    await store.rate_add({"dep:b": (1, 1)}, 60)
    await store.breaker_publish("a/m", open_for=10, blocked_for=10)
    await store.inflight_report("r1", {"a/m": (1, 0)}, ttl_s=5)
    await store.latency_merge({"a/m": {"n0": 1.0}}, half_life_s=60)
    await store.affinity_publish([AffinityEntry("r1", "a/m", "insert", (1,))])
    ttls = keys_with_ttl(prefix)
    assert len(ttls) == 7, ttls
    assert all(ttl > 0 for ttl in ttls.values()), ttls


async def test_an_unreachable_redis_is_unavailable_quickly() -> None:
    from gateway.state_store.base import StoreUnavailable
    from tests.gateway.state_store.redis_helpers import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(StoreUnavailable, match="redis at"):
        await store.rate_acquire("key:a", rpm=1, tpm=None, tokens=0, window_s=60)
    assert loop.time() - started < 1.0
    await store.aclose()
