"""The one way back from a request: every party that learns from requests is a `RequestObserver`,
told the same events in the same order, as a peer of the others.

    request_started     once, before the first attempt (the tool-call monitor attaches its trace)
    attempt_started     an attempt is sent to an endpoint (the breaker takes a half-open trial;
                        routing counts it in flight)
    attempt_committed   the endpoint produced its answer or first stream event (ctx.committed)
    attempt_failed      the attempt failed before commit, or the committed stream broke after it
                        (ctx.committed tells which); `error` is what was raised
    finished            the request is over and accounted: its `RequestRecord` (routing learns
                        and releases it, the monitor checks tool calls, metrics and the database
                        record it)

Dispatch emits the attempt events, the stream stage the failure after commit, and the accountant
`finished`; the app composes the peers (`Observers`), in order: breaker feedback, router,
tool-call monitor, limits (settlement), metrics, persistence, tracing (when on). Every method runs on the request path: O(1), no I/O,
never raising for its own troubles. A peer may name the events it acts on in `events`; the others
(no-ops) are then not called at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.catalog import Endpoint
from gateway.pipeline.context import RequestContext

if TYPE_CHECKING:
    from kernel.records import RequestRecord


EVENTS = ("request_started", "attempt_started", "attempt_committed", "attempt_failed", "finished")


class RequestObserver(Protocol):
    def request_started(self, ctx: RequestContext) -> None: ...

    def attempt_started(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None: ...

    def attempt_committed(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None: ...

    def attempt_failed(self, ctx: RequestContext, endpoint: Endpoint, now: float, error: BaseException) -> None: ...

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None: ...


def _acting(members: Sequence[RequestObserver], event: str) -> tuple[Any, ...]:
    return tuple(getattr(o, event) for o in members if event in getattr(o, "events", EVENTS))


class Observers:
    """Several observers as one, each event told in order to each that acts on it."""

    __slots__ = ("members", "_started", "_attempt", "_committed", "_failed", "_finished")

    def __init__(self, members: Sequence[RequestObserver] = ()) -> None:
        self.members = tuple(members)
        self._started = _acting(self.members, "request_started")
        self._attempt = _acting(self.members, "attempt_started")
        self._committed = _acting(self.members, "attempt_committed")
        self._failed = _acting(self.members, "attempt_failed")
        self._finished = _acting(self.members, "finished")

    def request_started(self, ctx: RequestContext) -> None:
        for tell in self._started:
            tell(ctx)

    def attempt_started(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        for tell in self._attempt:
            tell(ctx, endpoint, now)

    def attempt_committed(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        for tell in self._committed:
            tell(ctx, endpoint, now)

    def attempt_failed(self, ctx: RequestContext, endpoint: Endpoint, now: float, error: BaseException) -> None:
        for tell in self._failed:
            tell(ctx, endpoint, now, error)

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        for tell in self._finished:
            tell(ctx, record)


class RecordObserver:
    """The events a party that only records finished requests ignores (metrics, persistence)."""

    events: tuple[str, ...] = ("finished",)

    def request_started(self, ctx: RequestContext) -> None:
        return None

    def attempt_started(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        return None

    def attempt_committed(self, ctx: RequestContext, endpoint: Endpoint, now: float) -> None:
        return None

    def attempt_failed(self, ctx: RequestContext, endpoint: Endpoint, now: float, error: BaseException) -> None:
        return None
