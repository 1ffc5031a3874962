"""Candidate order: config order minus what the breaker or readiness rules out; never silently empty."""

from __future__ import annotations

from gateway.config import BreakerConfig
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.order import order_candidates
from tests.fakes.catalog import make_endpoint

CFG = BreakerConfig(min_requests=1, failure_rate=0.5, open_seconds=30)
A, B, C = make_endpoint("a/m"), make_endpoint("b/m"), make_endpoint("c/m")


def trip(breaker: CircuitBreaker, endpoint_id: str, now: float = 0.0, retry_after: float | None = None) -> None:
    breaker.record(endpoint_id, False, now, retry_after)


def ids(endpoints: tuple) -> list[str]:  # type: ignore[type-arg]
    return [ep.id for ep in endpoints]


def test_config_order_when_all_allowed() -> None:
    ordering = order_candidates([A, B, C], CircuitBreaker(CFG), 0)
    assert ids(ordering.endpoints) == ["a/m", "b/m", "c/m"]
    assert ordering.fail_open is None


def test_open_endpoints_are_left_out() -> None:
    breaker = CircuitBreaker(CFG)
    trip(breaker, "a/m")
    ordering = order_candidates([A, B, C], breaker, 1)
    assert ids(ordering.endpoints) == ["b/m", "c/m"]
    assert ordering.fail_open is None


def test_half_open_endpoint_comes_back() -> None:
    breaker = CircuitBreaker(CFG)
    trip(breaker, "a/m")
    assert ids(order_candidates([A, B], breaker, CFG.open_seconds).endpoints) == ["a/m", "b/m"]


def test_fail_open_when_all_are_blocked() -> None:
    breaker = CircuitBreaker(CFG)
    trip(breaker, "a/m", retry_after=50)
    trip(breaker, "b/m", retry_after=5)
    trip(breaker, "c/m")
    ordering = order_candidates([A, B, C], breaker, 1)
    assert ordering.fail_open == "circuit_open"
    # All are tried anyway, the soonest unblocked first.
    assert ids(ordering.endpoints) == ["c/m", "b/m", "a/m"]


def test_not_ready_endpoints_are_left_out_even_when_failing_open() -> None:
    down = make_endpoint("down/m", ready=lambda: False)
    breaker = CircuitBreaker(CFG)
    assert ids(order_candidates([down, A], breaker, 0).endpoints) == ["a/m"]
    trip(breaker, "a/m")
    ordering = order_candidates([down, A], breaker, 1)
    assert ids(ordering.endpoints) == ["a/m"] and ordering.fail_open == "circuit_open"


def test_nothing_ready_is_empty_and_not_fail_open() -> None:
    down = make_endpoint("down/m", ready=lambda: False)
    ordering = order_candidates([down], CircuitBreaker(CFG), 0)
    assert ordering.endpoints == () and ordering.fail_open is None


def test_never_empty_while_any_endpoint_is_ready() -> None:
    breaker = CircuitBreaker(CFG)
    endpoints = [make_endpoint(f"e{i}/m", ready=(lambda i=i: i % 2 == 0)) for i in range(6)]
    for i, ep in enumerate(endpoints):
        trip(breaker, ep.id, retry_after=float(i))
    for now in (0.0, 1.0, 10.0, 100.0):
        assert order_candidates(endpoints, breaker, now).endpoints


def test_readiness_is_read_at_call_time() -> None:
    state = {"ready": False}
    ep = make_endpoint("e/m", ready=lambda: state["ready"])
    assert order_candidates([ep], CircuitBreaker(CFG), 0).endpoints == ()
    state["ready"] = True
    assert ids(order_candidates([ep], CircuitBreaker(CFG), 0).endpoints) == ["e/m"]
