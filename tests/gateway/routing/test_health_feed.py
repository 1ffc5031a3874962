"""Health states through the state store (two replicas over one in-process store): published as
they happen, adopted at the other's next sync; queued while the store is away and pushed when it
returns; republished after an outage that lost them; a stale replay never replaces a newer state."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.health_states import STORE_SINK, HealthStates
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.health_feed import HealthFeed, decode, encode
from gateway.routing.settings import RoutingConfig
from gateway.routing.shared import SharedState
from gateway.state_store.config import StateStoreConfig
from gateway.state_store.memory import MemoryStore
from kernel.health import EndpointHealth
from tests.fakes.clock import FakeClock
from tests.gateway.routing.test_shared import BREAKER, CATALOG, FlakyStore


class Replica:
    def __init__(self, store: Any, clock: FakeClock, name: str) -> None:
        self.feed = HealthFeed(store)
        self.health = HealthStates({STORE_SINK: self.feed})
        self.shared = SharedState(
            RoutingConfig(), StateStoreConfig(), CATALOG, store, CircuitBreaker(BREAKER),
            health=self.health, health_feed=self.feed, clock=clock, replica_id=name,
        )

    async def demote(self, endpoint_id: str, at: float) -> dict[str, bool]:
        outcome: dict[str, bool] = {}
        await self.health.transition(endpoint_id, "demoted", source="manual", reason="ops", at=at, operator=True,
                                     outcome=outcome)
        return outcome


def test_records_round_trip() -> None:
    entry = EndpointHealth("probation", True, 0.1, "probe", "é \n", 1_764_590_000.123456, 3.25)
    assert decode(encode(entry)) == entry
    assert decode(encode(EndpointHealth())) == EndpointHealth()
    for bad in (b"not json", b'{"state": "broken"}', b"[]"):
        with pytest.raises(ValueError):
            decode(bad)


async def test_published_at_once_and_adopted_at_the_next_sync() -> None:
    clock = FakeClock()
    store = MemoryStore(clock)
    one, two = Replica(store, clock, "r1"), Replica(store, clock, "r2")
    assert await one.demote("l-0", at=100.0) == {STORE_SINK: True}
    assert two.shared.snapshot().health("l-0") == "healthy"  # not before its sync
    assert await two.shared.sync_once()
    assert two.shared.snapshot().health("l-0") == "demoted" and two.health.get("l-0").manual
    assert two.health.get("l-0") == one.health.get("l-0")  # since, reason, operator_at: all of it
    assert await one.shared.sync_once()  # its own record comes back: nothing changes
    assert one.feed.refused == 0


async def test_queued_while_the_store_is_away_and_pushed_when_it_returns() -> None:
    clock = FakeClock()
    inner = MemoryStore(clock)
    flaky = FlakyStore(inner)
    one, two = Replica(flaky, clock, "r1"), Replica(inner, clock, "r2")
    assert await one.shared.sync_once()
    flaky.down = True
    assert await one.demote("l-0", at=100.0) == {STORE_SINK: False}
    assert one.health.state("l-0") == "demoted"  # routing here has it at once
    assert one.feed.pending == 1 and one.shared.status()["health_states_waiting"] == 1
    assert not await one.shared.sync_once()
    assert await two.shared.sync_once() and two.health.state("l-0") == "healthy"
    flaky.down = False
    assert await one.shared.sync_once()
    assert one.feed.pending == 0
    assert await two.shared.sync_once() and two.health.state("l-0") == "demoted"


async def test_republished_after_an_outage_that_lost_them() -> None:
    clock = FakeClock()
    inner = MemoryStore(clock)
    flaky = FlakyStore(inner)
    one = Replica(flaky, clock, "r1")
    assert await one.shared.sync_once()
    assert await one.demote("l-0", at=100.0) == {STORE_SINK: True}
    flaky.down = True
    assert not await one.shared.sync_once()
    inner._health.clear()  # the store restarted empty
    flaky.down = False
    assert await one.shared.sync_once()  # came back: everything local is published again
    two = Replica(inner, clock, "r2")
    assert await two.shared.sync_once() and two.health.state("l-0") == "demoted"


async def test_a_stale_replay_never_replaces_a_newer_state() -> None:
    clock = FakeClock()
    inner = MemoryStore(clock)
    flaky = FlakyStore(inner)
    one, two = Replica(flaky, clock, "r1"), Replica(inner, clock, "r2")
    flaky.down = True
    await one.health.transition("l-1", "demoted", source="manual", reason="older", at=100.0, operator=True)
    assert one.feed.pending == 1  # waits in one's queue
    await two.health.transition("l-1", "demoted", source="manual", reason="newer", at=150.0, operator=True)
    flaky.down = False
    assert await one.shared.sync_once()  # pushes its older state (refused), then pulls the newer
    assert one.feed.refused == 1
    assert one.health.get("l-1").reason == "newer" and one.health.get("l-1") == two.health.get("l-1")
    assert await two.shared.sync_once() and two.health.get("l-1").reason == "newer"
