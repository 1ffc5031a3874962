"""Two gateway replicas (the app the server builds, twice) sharing the real Redis and no database:
an operator's demotion through one is in the other's routing by the end of its next sync tick,
and the restore travels the same way. Also: a probe's automatic move made on a view that had not
yet seen the operator's pin does not undo the pin on any replica."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.state import AppState
from providers.http_mock import MockHTTPClient
from tests.gateway.persistence.app_helpers import ADMIN, CHAT, USER, answer, settings
from tests.gateway.state_store.redis_helpers import REDIS_URL, delete_prefix, redis_available, unique_prefix
from tests.services import require

SYNC_S = 0.2
# Routing prefers p, then q: the endpoint that serves says whether p is routable.
PREFER_P = {**CHAT, "provider": {"order": ["p", "q"]}}


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    config = settings(
        tmp_path,
        None,  # no database: the state store is the only way between the replicas
        state_store={"backend": "redis", "url": REDIS_URL, "key_prefix": prefix, "sync_interval_s": SYNC_S},
        deployments=[
            {"model": "m", "provider": "p", "upstream_model": "up"},
            {"model": "m", "provider": "q", "upstream_model": "up"},
        ],
    )
    assert not config.persistence.enabled
    make = lambda: create_app(config, client_factory=lambda: MockHTTPClient(answer))  # noqa: E731
    try:
        with TestClient(make()) as one, TestClient(make()) as two:
            yield one, two
    finally:
        delete_prefix(prefix)


def gw(client: TestClient) -> AppState:
    state: AppState = client.app_state["gw"]
    return state


def served_by(client: TestClient) -> str:
    response = client.post("/v1/chat/completions", json=PREFER_P, headers=USER)
    assert response.status_code == 200, response.text
    return str(response.headers["x-gateway-endpoint"])


def within_next_tick(state: AppState, done: Callable[[], bool], timeout: float = 25 * SYNC_S) -> tuple[int, float]:
    """Wait until `done()`; returns how many sync ticks of `state` began meanwhile, and the seconds."""
    assert state.shared is not None
    ticks, start = state.shared.sync.ticks, time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout, "never adopted"
        time.sleep(0.002)
    return state.shared.sync.ticks - ticks, time.monotonic() - start


def manual(client: TestClient, action: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"/admin/api/health/{action}", json={"endpoint": "p/m", **body}, headers=ADMIN)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_a_demotion_and_its_restore_reach_the_other_replica_within_one_sync(
    replicas: tuple[TestClient, TestClient],
) -> None:
    one, two = replicas
    other = gw(two)
    assert other.shared is not None and other.persistence is None
    assert served_by(two) == "p/m"

    demoted = manual(one, "demote", reason="wrong model behind it")
    assert demoted["changed"] and demoted["persisted"] is None  # no database: published only
    # A tick already past its pull when the demotion landed, then the one that adopts it.
    ticks, seconds = within_next_tick(other, lambda: other.shared.snapshot().health("p/m") == "demoted")
    assert ticks <= 2, f"adopted after {ticks} ticks ({seconds:.3f} s)"
    assert other.health.get("p/m").manual and other.health.get("p/m").reason == "wrong model behind it"
    assert served_by(two) == "q/m"

    manual(one, "restore", reason="provider fixed it")
    ticks, seconds = within_next_tick(other, lambda: other.shared.snapshot().health("p/m") == "healthy")
    assert ticks <= 2, f"restore adopted after {ticks} ticks ({seconds:.3f} s)"
    assert not other.health.get("p/m").manual
    assert served_by(two) == "p/m"


def test_a_stale_automatic_move_does_not_undo_a_pin(replicas: tuple[TestClient, TestClient]) -> None:
    one, two = replicas
    here, other = gw(one), gw(two)
    assert here.shared is not None and other.shared is not None
    # Stop the other replica's pulls: it does not learn of the pin before its probe decides.
    other_pull = other.shared.sync.pull

    async def no_pull(now: float, latency_tick: bool = True) -> None:
        return None

    other.shared.sync.pull = no_pull  # type: ignore[method-assign]
    begun = other.shared.sync.ticks  # let a tick that began with the real pull finish first
    within_next_tick(other, lambda: other.shared is not None and other.shared.sync.ticks >= begun + 2)
    pinned_at = time.time()
    manual(one, "demote", reason="operator says no")
    # A probe on the other replica, a second later, on its stale (healthy) view.
    two.portal.call(  # type: ignore[union-attr]
        lambda: other.health.transition("p/m", "suspect", source="probe", reason="drift", at=pinned_at + 1.0)
    )
    assert other.health.state("p/m") == "suspect"
    other.shared.sync.pull = other_pull  # type: ignore[method-assign]
    within_next_tick(other, lambda: other.health.state("p/m") == "demoted")
    assert other.health.get("p/m").manual
    # Nor did the first replica, two of its ticks later.
    start = here.shared.sync.ticks
    within_next_tick(here, lambda: here.shared is not None and here.shared.sync.ticks >= start + 2)
    assert here.health.state("p/m") == "demoted" and here.health.get("p/m").manual
    assert other.shared.health_feed is not None and other.shared.health_feed.refused == 1
