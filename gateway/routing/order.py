"""Candidate ordering for dispatch: config order, minus endpoints the breaker or readiness rule out.

The routing issue replaces this with scored policies; the contract stays: a pure function of
the candidates and a snapshot, returning the order to try and whether it failed open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.catalog import Endpoint
from gateway.routing.breaker import CircuitBreaker


@dataclass(frozen=True, slots=True)
class Ordering:
    endpoints: tuple[Endpoint, ...]
    # Every candidate was ruled out, so all are tried anyway; the response says so.
    fail_open: str | None = None


def order_candidates(candidates: Sequence[Endpoint], breaker: CircuitBreaker, now: float) -> Ordering:
    ready = [ep for ep in candidates if ep.is_ready()]
    if not ready:
        return Ordering((), fail_open=None)
    allowed = tuple(ep for ep in ready if breaker.allows(ep.id, now))
    if allowed:
        return Ordering(allowed)
    # Never remove the last candidates silently: try them, soonest-unblocked first, and say so.
    by_unblock = sorted(ready, key=lambda ep: breaker.blocked_until(ep.id))
    return Ordering(tuple(by_unblock), fail_open="circuit_open")
