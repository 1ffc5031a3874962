"""Per-endpoint circuit breaker: an error-rate window with a minimum sample, half-open trials,
and upstream ``Retry-After`` honoured as a temporary block.

Pure logic over its own small state; every method takes ``now`` (monotonic seconds), so tests
drive time explicitly. Only 429s, 5xx, timeouts and connection errors are recorded as failures;
the caller decides that (`ProviderError.counts_against_endpoint`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from gateway.config import BreakerConfig

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class _Endpoint:
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    failures: int = 0
    open_until: float | None = None  # set while open or half-open
    trials: list[float] = field(default_factory=list)  # start times of half-open trials
    blocked_until: float = 0.0  # upstream asked us to wait (Retry-After)


class CircuitBreaker:
    def __init__(self, config: BreakerConfig) -> None:
        self._cfg = config
        self._endpoints: dict[str, _Endpoint] = {}

    def state(self, endpoint_id: str, now: float) -> BreakerState:
        ep = self._endpoints.get(endpoint_id)
        if ep is None or ep.open_until is None:
            return "closed"
        return "open" if now < ep.open_until else "half_open"

    def blocked_until(self, endpoint_id: str) -> float:
        ep = self._endpoints.get(endpoint_id)
        return ep.blocked_until if ep else 0.0

    def allows(self, endpoint_id: str, now: float) -> bool:
        """Would a request be admitted now? No side effects."""
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            return True
        if now < ep.blocked_until:
            return False
        state = self.state(endpoint_id, now)
        if state == "open":
            return False
        if state == "half_open":
            return len(self._live_trials(ep, now)) < self._cfg.half_open_probes
        return True

    def acquire(self, endpoint_id: str, now: float) -> None:
        """Called when a request is sent; takes a trial slot when half-open."""
        ep = self._endpoints.get(endpoint_id)
        if ep is not None and self.state(endpoint_id, now) == "half_open":
            ep.trials = self._live_trials(ep, now)
            ep.trials.append(now)

    def record(self, endpoint_id: str, ok: bool, now: float, retry_after: float | None = None) -> None:
        ep = self._endpoints.get(endpoint_id)
        if ep is None:
            if ok:
                return  # nothing to remember about a healthy endpoint we never saw fail
            ep = self._endpoints[endpoint_id] = _Endpoint()
        if retry_after is not None and retry_after > 0:
            ep.blocked_until = max(ep.blocked_until, now + retry_after)
        state = self.state(endpoint_id, now)
        if state == "half_open":
            if ok:
                self._endpoints[endpoint_id] = _Endpoint(blocked_until=ep.blocked_until)
            else:
                self._trip(ep, now)
            return
        self._push(ep, ok, now)
        if state == "closed" and not ok and self._tripped(ep):
            self._trip(ep, now)

    def snapshot(self, now: float) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for endpoint_id, ep in self._endpoints.items():
            n = len(ep.outcomes)
            out[endpoint_id] = {
                "state": self.state(endpoint_id, now),
                "window_requests": n,
                "window_failures": ep.failures,
                "blocked_for_s": round(max(0.0, ep.blocked_until - now), 3),
                "open_for_s": round(max(0.0, (ep.open_until or now) - now), 3),
            }
        return out

    # -- internals ------------------------------------------------------------

    def _push(self, ep: _Endpoint, ok: bool, now: float) -> None:
        ep.outcomes.append((now, ok))
        if not ok:
            ep.failures += 1
        horizon = now - self._cfg.window_seconds
        while ep.outcomes and ep.outcomes[0][0] < horizon:
            _, old_ok = ep.outcomes.popleft()
            if not old_ok:
                ep.failures -= 1

    def _tripped(self, ep: _Endpoint) -> bool:
        n = len(ep.outcomes)
        return n >= self._cfg.min_requests and ep.failures / n >= self._cfg.failure_rate

    def _trip(self, ep: _Endpoint, now: float) -> None:
        ep.open_until = now + self._cfg.open_seconds
        ep.trials = []
        ep.outcomes.clear()
        ep.failures = 0

    def _live_trials(self, ep: _Endpoint, now: float) -> list[float]:
        # A trial that never reported back (cancelled) frees its slot after open_seconds.
        return [t for t in ep.trials if now - t < self._cfg.open_seconds]
