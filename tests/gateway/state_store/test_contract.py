"""One contract, two backends: every test runs against `MemoryStore` (a fake clock) and
`RedisStore` on the real Redis server (real time, short durations, a unique key prefix)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import redis as sync_redis

from gateway.state_store.base import HEALTH_TTL_S, AffinityEntry, StateStore
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
    await store.health_publish("a/m", (0.0, 1.0), b"x")
    await store.kv_put("probe:evidence:a/m", b"{}", 60)
    await store.lease_acquire("probe:x:a/m", "r1", 60)
    ttls = keys_with_ttl(prefix)
    assert len(ttls) == 10, ttls
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


def test_both_backends_implement_the_whole_protocol() -> None:
    members = {
        name for name in dir(StateStore) if not name.startswith("_")
    } | set(StateStore.__annotations__)
    assert {"kv_get", "kv_put", "lease_acquire", "lease_release", "health_publish", "health_read", "shared"} <= members
    for cls in (MemoryStore, RedisStore):
        for name in members:
            assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
            declared = getattr(StateStore, name, None)
            if callable(declared):
                want = list(inspect.signature(declared).parameters)
                assert list(inspect.signature(getattr(cls, name)).parameters) == want, (cls.__name__, name)


# -- small values and leases (the probes' evidence and schedule) ------------------------------


async def test_kv_reads_back_and_expires(backend: Backend) -> None:
    store = backend.store
    assert await store.kv_get("probe:evidence:a") is None
    await store.kv_put("probe:evidence:a", b'{"cusum": {}}', 0.3)
    assert await store.kv_get("probe:evidence:a") == b'{"cusum": {}}'
    await store.kv_put("probe:evidence:a", b"\x00binary", 0.3)  # replaces, any bytes
    assert await store.kv_get("probe:evidence:a") == b"\x00binary"
    await backend.advance(0.4)
    assert await store.kv_get("probe:evidence:a") is None


async def test_lease_is_exclusive_renewable_and_expires(backend: Backend) -> None:
    store = backend.store
    assert await store.lease_acquire("probe:x:a", "r1", 0.3)
    assert not await store.lease_acquire("probe:x:a", "r2", 0.3)
    assert await store.lease_acquire("probe:x:b", "r2", 0.3)  # another job is another lease
    assert await store.lease_acquire("probe:x:a", "r1", 0.3)  # the holder renews
    await backend.advance(0.4)
    assert await store.lease_acquire("probe:x:a", "r2", 0.3)  # expired: taken over
    # A renewal extends the term (a scheduled run renews its lease while it lasts).
    assert await store.lease_acquire("probe:x:a", "r2", 30)
    await backend.advance(0.4)
    assert not await store.lease_acquire("probe:x:a", "r1", 0.3)


async def test_lease_release_only_by_the_holder(backend: Backend) -> None:
    store = backend.store
    assert await store.lease_acquire("probe:y:a", "r1", 30)
    await store.lease_release("probe:y:a", "r2")
    assert not await store.lease_acquire("probe:y:a", "r2", 30)
    await store.lease_release("probe:y:a", "r1")
    assert await store.lease_acquire("probe:y:a", "r2", 30)


async def test_concurrent_lease_acquires_give_one_holder(backend: Backend) -> None:
    got = await asyncio.gather(*(backend.store.lease_acquire("probe:z:a", f"r{i}", 30) for i in range(8)))
    assert sum(got) == 1


# -- health states --------------------------------------------------------------------------


async def test_health_keeps_the_record_with_the_later_version(backend: Backend) -> None:
    store = backend.store
    assert await store.health_read() == {}
    t = 1_764_590_000.123456  # wall-clock seconds: versions must compare exactly, not rounded
    assert await store.health_publish("a/m", (0.0, t), b"suspect")
    assert await store.health_publish("a/m", (0.0, t + 1e-6), b"demoted")
    assert not await store.health_publish("a/m", (0.0, t), b"stale")  # replayed late
    assert await store.health_publish("a/m", (0.0, t + 1e-6), b"demoted again")  # an equal version replaces
    # The first part outranks the second: an operator's action beats a later automatic move.
    assert await store.health_publish("a/m", (t - 5, t - 5), b"pinned")
    assert not await store.health_publish("a/m", (0.0, t + 60), b"automatic, from a stale view")
    assert await store.health_publish("a/m", (t + 1, t + 1), b"restored")
    assert await store.health_publish("b/m", (0.0, 1.0), b"other")  # endpoints are independent
    assert await store.health_read() == {"a/m": b"restored", "b/m": b"other"}


async def test_concurrent_health_publishes_keep_the_latest_version(backend: Backend) -> None:
    versions = [(0.0, 100.0 + i) for i in range(10)]
    order = [3, 9, 0, 7, 1, 8, 2, 6, 4, 5]
    await asyncio.gather(*(backend.store.health_publish("c/m", versions[i], f"v{i}".encode()) for i in order))
    assert (await backend.store.health_read())["c/m"] == b"v9"


async def test_a_health_record_holds_binary_and_spaces(backend: Backend) -> None:
    record = b'{"reason": "two  spaces and a \\n"} \x00\xff'
    assert await backend.store.health_publish("d/m", (1.5, 2.5), record)
    assert (await backend.store.health_read())["d/m"] == record


async def test_the_health_record_expires_a_week_after_its_last_write(redis_store: tuple[RedisStore, str]) -> None:
    store, prefix = redis_store
    await store.health_publish("a/m", (0.0, 1.0), b"x")
    (ttl,) = keys_with_ttl(prefix).values()
    assert HEALTH_TTL_S * 1000 - 60_000 < ttl <= HEALTH_TTL_S * 1000


async def test_memory_health_records_expire() -> None:
    clock = FakeClock(start=0.0)
    store = MemoryStore(clock)
    await store.health_publish("a/m", (0.0, 1.0), b"x")
    clock.advance(HEALTH_TTL_S - 1)
    assert await store.health_read() == {"a/m": b"x"}
    clock.advance(2)
    assert await store.health_read() == {}
    assert await store.health_publish("a/m", (0.0, 0.5), b"older, but the newer one is gone")


async def test_an_unreadable_stored_health_record_is_replaced(redis_store: tuple[RedisStore, str]) -> None:
    store, prefix = redis_store
    client = sync_redis.Redis.from_url(REDIS_URL)
    try:
        client.hset(f"{prefix}health", "a/m", b"garbage")
    finally:
        client.close()
    assert await store.health_read() == {}
    assert await store.health_publish("a/m", (0.0, 1.0), b"fresh")
    assert (await store.health_read())["a/m"] == b"fresh"
