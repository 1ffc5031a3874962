"""The breaker's side of request feedback (a `gateway.pipeline.observe.RequestObserver`): a
half-open trial taken when an attempt is sent, a success when it commits, a failure when it fails
on the endpoint's account, or when its committed stream breaks."""

from __future__ import annotations

from typing import Any

from gateway.catalog import Endpoint
from gateway.routing.breaker import CircuitBreaker
from kernel.errors import ProviderError


class BreakerFeedback:
    __slots__ = ("breaker",)
    events = ("attempt_started", "attempt_committed", "attempt_failed")

    def __init__(self, breaker: CircuitBreaker) -> None:
        self.breaker = breaker

    def request_started(self, ctx: Any) -> None:
        return None

    def attempt_started(self, ctx: Any, endpoint: Endpoint, now: float) -> None:
        self.breaker.acquire(endpoint.id, now)

    def attempt_committed(self, ctx: Any, endpoint: Endpoint, now: float) -> None:
        self.breaker.record(endpoint.id, True, now)

    def attempt_failed(self, ctx: Any, endpoint: Endpoint, now: float, error: BaseException) -> None:
        # Before commit only failures that are the endpoint's own count (not a refused request);
        # a committed stream that breaks always does.
        if isinstance(error, ProviderError) and (ctx.committed or error.counts_against_endpoint):
            self.breaker.record(endpoint.id, False, now, error.retry_after)

    def finished(self, ctx: Any, record: Any = None) -> None:
        return None
