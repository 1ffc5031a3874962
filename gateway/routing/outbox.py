"""What this replica changed and has not yet published to the state store: circuit breaker
changes (coalesced per endpoint) and the affinity entries it learned, in order."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from gateway.state_store.base import AffinityEntry

# endpoint id -> (open for: seconds, 0 = closed, None = unchanged; blocked for: seconds; queued at).
BreakerEvent = tuple[float | None, float, float]


class Outbox:
    def __init__(self, replica: str, max_affinity: int = 0) -> None:
        self.replica = replica
        self.breaker: dict[str, BreakerEvent] = {}
        self.affinity: deque[AffinityEntry] = deque(maxlen=max_affinity or None)

    def breaker_changed(self, endpoint_id: str, open_for: float | None, blocked_for: float, now: float) -> None:
        """Queue a breaker change: the latest open/close wins, the longest block stands."""
        old = self.breaker.get(endpoint_id)
        if old is not None:
            old_open, old_blocked, at = old
            if open_for is None and old_open is not None:
                open_for = max(0.0, old_open - (now - at)) if old_open > 0 else 0.0
                if old_open > 0 and open_for == 0:
                    open_for = None
            blocked_for = max(blocked_for, old_blocked - (now - at))
        self.breaker[endpoint_id] = (open_for, max(0.0, blocked_for), now)

    def learned(self, endpoint_id: str, chain: list[int]) -> None:
        self.affinity.append(AffinityEntry(self.replica, endpoint_id, "insert", tuple(chain)))

    def take(self) -> tuple[dict[str, BreakerEvent], list[AffinityEntry]]:
        """Everything queued, to publish (`restore` puts back what a failed push did not deliver)."""
        breaker, self.breaker = self.breaker, {}
        affinity = list(self.affinity)
        self.affinity.clear()
        return breaker, affinity

    def restore(self, breaker: Mapping[str, BreakerEvent], affinity: list[AffinityEntry]) -> None:
        for endpoint_id, event in breaker.items():
            self.breaker.setdefault(endpoint_id, event)  # a change queued meanwhile is newer
        self.affinity.extendleft(reversed(affinity))
