"""What only the Redis backend does: refuse values out of its integer range (`StoreRejected`, never
retried), while the SharedState over it stays "available" when an upstream claims absurd usage."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from gateway.catalog import Catalog
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.settings import BreakerConfig, RoutingConfig
from gateway.routing.shared import SharedState
from gateway.state_store.base import StoreRejected
from gateway.state_store.config import StateStoreConfig
from gateway.state_store.redis import RedisStore
from tests.gateway.routing.helpers import endpoint
from tests.gateway.state_store.redis_helpers import REDIS_URL, delete_prefix, redis_available, unique_prefix

pytestmark = pytest.mark.services
LIMITED = endpoint("cloud/m", routing={"tpm": 1000})


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    if not redis_available():
        message = f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    prefix = unique_prefix()
    redis_store = RedisStore(REDIS_URL, prefix=prefix, timeout=1.0)
    try:
        yield redis_store
    finally:
        await redis_store.aclose()
        delete_prefix(prefix)


async def test_a_count_past_the_integer_range_is_rejected_not_unavailable(store: RedisStore) -> None:
    with pytest.raises(StoreRejected):
        await store.rate_add({"dep:x": (1, 10**17)}, 60)
    await store.rate_add({"dep:y": (1, 10**15)}, 60)  # the store itself is fine
    assert await store.rate_usage(["dep:y"], 60) == {"dep:y": (1, 10**15)}


async def test_absurd_upstream_usage_does_not_leave_the_replica_store_unavailable(store: RedisStore) -> None:
    shared = SharedState(
        RoutingConfig(), StateStoreConfig(), Catalog([LIMITED], created=0), store, CircuitBreaker(BreakerConfig()), replica_id="r"
    )
    shared.started(LIMITED, 0, 10)
    shared.adjust_deployment_tokens("cloud/m", 10**17)  # what a 1e17-token usage report adds
    for _ in range(3):
        assert await shared.sync_once()
    assert shared.status()["ok"] and shared.store_ok


async def test_a_huge_retry_after_is_published_clamped_not_overflowing(store: RedisStore) -> None:
    shared = SharedState(
        RoutingConfig(), StateStoreConfig(), Catalog([LIMITED], created=0), store, CircuitBreaker(BreakerConfig()), replica_id="r"
    )
    for value in (1e306, 2e305, float("inf")):
        shared.breaker.record("cloud/m", False, shared.clock(), retry_after=value)
        assert await shared.sync_once()  # int(inf * 1000) used to raise OverflowError here
    (view,) = (await store.breaker_read(["cloud/m"])).values()
    assert 290 < view.blocked_for <= 300
