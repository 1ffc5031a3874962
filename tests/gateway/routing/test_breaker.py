"""Circuit breaker: pure logic driven by an explicit `now`."""

from __future__ import annotations

import pytest

from gateway.routing.breaker import CircuitBreaker
from gateway.routing.settings import BreakerConfig

CFG = BreakerConfig(window_seconds=60, min_requests=4, failure_rate=0.5, open_seconds=30, half_open_probes=1)
EP = "a/m"


def fail(breaker: CircuitBreaker, n: int, now: float = 0.0) -> None:
    for _ in range(n):
        breaker.record(EP, False, now)


def succeed(breaker: CircuitBreaker, n: int, now: float = 0.0) -> None:
    for _ in range(n):
        breaker.record(EP, True, now)


def tripped(now: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(CFG)
    fail(breaker, CFG.min_requests, now)
    assert breaker.state(EP, now) == "open"
    return breaker


def test_unknown_endpoint_is_closed_and_allowed() -> None:
    breaker = CircuitBreaker(CFG)
    assert breaker.state(EP, 0) == "closed"
    assert breaker.allows(EP, 0)
    assert breaker.blocked_until(EP) == 0.0


def test_minimum_sample_before_tripping() -> None:
    breaker = CircuitBreaker(CFG)
    fail(breaker, CFG.min_requests - 1)
    assert breaker.state(EP, 0) == "closed" and breaker.allows(EP, 0)
    fail(breaker, 1)
    assert breaker.state(EP, 0) == "open" and not breaker.allows(EP, 0)


def test_trips_at_the_failure_rate_not_below() -> None:
    breaker = CircuitBreaker(CFG)
    succeed(breaker, 3)
    fail(breaker, 2)  # 2/5 = 40% < 50%
    assert breaker.state(EP, 0) == "closed"
    fail(breaker, 1)  # 3/6 = 50%
    assert breaker.state(EP, 0) == "open"


def test_successes_before_the_first_failure_count() -> None:
    breaker = CircuitBreaker(CFG)
    succeed(breaker, 100)
    fail(breaker, CFG.min_requests)  # 4 failures in 104 requests: a blip, not an outage
    assert breaker.state(EP, 0) == "closed"
    assert breaker.snapshot(0)[EP]["window_requests"] == 100 + CFG.min_requests


def test_window_memory_does_not_grow_with_traffic() -> None:
    breaker = CircuitBreaker(CFG)
    for i in range(20_000):
        breaker.record(EP, i % 10 != 0, i * 0.01)  # 200 s of traffic, 10% failures
    assert len(breaker._endpoints[EP].buckets) <= 61  # white-box: counts per bucket, not per request
    snap = breaker.snapshot(200)
    assert 5_900 <= snap[EP]["window_requests"] <= 6_100  # about the last 60 s
    assert breaker.state(EP, 200) == "closed"


def test_successes_alone_never_trip() -> None:
    breaker = CircuitBreaker(CFG)
    succeed(breaker, 100)
    assert breaker.state(EP, 0) == "closed"


def test_old_outcomes_leave_the_window() -> None:
    breaker = CircuitBreaker(CFG)
    fail(breaker, CFG.min_requests - 1, now=0)
    fail(breaker, 1, now=CFG.window_seconds + 1)  # the first three are out of the window
    assert breaker.state(EP, CFG.window_seconds + 1) == "closed"
    assert breaker.snapshot(CFG.window_seconds + 1)[EP]["window_requests"] == 1


def test_open_becomes_half_open_after_open_seconds() -> None:
    breaker = tripped(now=100)
    assert breaker.state(EP, 100 + CFG.open_seconds - 0.001) == "open"
    assert not breaker.allows(EP, 100 + CFG.open_seconds - 0.001)
    assert breaker.state(EP, 100 + CFG.open_seconds) == "half_open"
    assert breaker.allows(EP, 100 + CFG.open_seconds)


def test_half_open_trial_slots() -> None:
    cfg = CFG.model_copy(update={"half_open_probes": 2})
    breaker = CircuitBreaker(cfg)
    for _ in range(cfg.min_requests):
        breaker.record(EP, False, 0)
    t = cfg.open_seconds
    breaker.acquire(EP, t)
    assert breaker.allows(EP, t)  # one of two slots taken
    breaker.acquire(EP, t)
    assert not breaker.allows(EP, t)  # both taken: no third trial
    assert breaker.state(EP, t) == "half_open"


def test_abandoned_trial_frees_its_slot() -> None:
    breaker = tripped()
    t = CFG.open_seconds
    breaker.acquire(EP, t)
    assert not breaker.allows(EP, t + 1)
    assert breaker.allows(EP, t + CFG.open_seconds)  # the trial never reported back


def test_acquire_when_closed_takes_no_slot() -> None:
    breaker = CircuitBreaker(CFG)
    fail(breaker, 1)
    for _ in range(5):
        breaker.acquire(EP, 0)
    assert breaker.allows(EP, 0)


def test_trial_success_closes() -> None:
    breaker = tripped()
    t = CFG.open_seconds
    breaker.acquire(EP, t)
    breaker.record(EP, True, t + 0.1)
    assert breaker.state(EP, t + 0.1) == "closed"
    assert breaker.allows(EP, t + 0.1)
    # A fresh window: it takes a full minimum sample to trip again.
    fail(breaker, CFG.min_requests - 1, now=t + 0.2)
    assert breaker.state(EP, t + 0.2) == "closed"


def test_trial_failure_reopens_for_another_period() -> None:
    breaker = tripped()
    t = CFG.open_seconds
    breaker.acquire(EP, t)
    breaker.record(EP, False, t + 1)
    assert breaker.state(EP, t + 1) == "open"
    assert breaker.state(EP, t + 1 + CFG.open_seconds - 0.01) == "open"
    assert breaker.state(EP, t + 1 + CFG.open_seconds) == "half_open"


def test_retry_after_blocks_even_when_closed() -> None:
    breaker = CircuitBreaker(CFG)
    breaker.record(EP, False, 10, retry_after=5)
    assert breaker.state(EP, 10) == "closed"
    assert breaker.blocked_until(EP) == 15
    assert not breaker.allows(EP, 14.9)
    assert breaker.allows(EP, 15)


def test_retry_after_is_kept_through_a_trial_success() -> None:
    breaker = tripped()
    t = CFG.open_seconds
    breaker.record(EP, True, t, retry_after=None)
    breaker.record(EP, False, t, retry_after=100)
    assert breaker.blocked_until(EP) == t + 100
    breaker.record(EP, True, t + 1)
    assert breaker.blocked_until(EP) == t + 100


def test_longest_retry_after_wins() -> None:
    breaker = CircuitBreaker(CFG)
    breaker.record(EP, False, 0, retry_after=10)
    breaker.record(EP, False, 1, retry_after=2)
    assert breaker.blocked_until(EP) == 10


@pytest.mark.parametrize("retry_after", [0, -1, None])
def test_no_block_without_a_positive_retry_after(retry_after: float | None) -> None:
    breaker = CircuitBreaker(CFG)
    breaker.record(EP, False, 0, retry_after=retry_after)
    assert breaker.allows(EP, 0)


def test_endpoints_are_independent() -> None:
    breaker = tripped()
    assert breaker.allows("b/m", 0)
    assert breaker.state("b/m", 0) == "closed"


def test_snapshot() -> None:
    breaker = tripped(now=0)
    breaker.record("b/m", False, 0, retry_after=3)
    snap = breaker.snapshot(10)
    assert snap[EP] == {
        "state": "open",
        "window_requests": 0,
        "window_failures": 0,
        "blocked_for_s": 0.0,
        "open_for_s": 20.0,
    }
    assert snap["b/m"]["state"] == "closed"
    assert snap["b/m"]["window_failures"] == 1
    assert snap["b/m"]["blocked_for_s"] == 0.0  # 3 s from t=0 have passed
    assert breaker.snapshot(1)["b/m"]["blocked_for_s"] == 2.0


def test_a_block_is_clamped_to_max_block_s_and_a_non_finite_one_ignored() -> None:
    breaker = CircuitBreaker(CFG, max_block_s=300)
    heard: list[tuple[str, float | None, float]] = []
    breaker.listener = lambda *event: heard.append(event)
    breaker.record(EP, False, 0, retry_after=float("inf"))
    breaker.record(EP, False, 0, retry_after=float("nan"))
    assert breaker.blocked_until(EP) == 0 and heard == []
    breaker.record(EP, False, 0, retry_after=1e306)
    assert breaker.blocked_until(EP) == 300
    assert heard == [(EP, None, 300)]  # what other replicas hear is clamped too


def test_a_shared_block_is_clamped_too() -> None:
    breaker = CircuitBreaker(CFG, max_block_s=300)
    breaker.merge_shared(EP, 0.0, 1e20, 10)
    assert breaker.blocked_until(EP) == 310
    breaker.merge_shared("other", 0.0, float("inf"), 10)
    assert breaker.allows("other", 10)
