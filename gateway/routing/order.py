"""What the route stage hands dispatch: the endpoints to try, in order, and whether it failed open.

`gateway.routing.router.Router.route` produces it from the scored policies (filters with reason
codes, score terms, guards). `order_candidates` is the plain configuration-order ordering (minus
what readiness or the breaker rules out, never silently empty): the `config_order` behaviour
without the rest of the route stage, for callers that need no routing state.
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
