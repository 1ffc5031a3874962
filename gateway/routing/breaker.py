"""Per-endpoint circuit breaker: an error-rate window with a minimum sample, half-open trials,
and upstream ``Retry-After`` honoured as a temporary block.

Pure logic over its own small state; every method takes ``now`` (monotonic seconds), so tests
drive time explicitly. Only 429s, 5xx, timeouts and connection errors are recorded as failures;
the caller decides that (`ProviderError.counts_against_endpoint`).

Shared across gateway replicas through the state store (`gateway.routing.shared`): a `listener`
hears every trip, close and Retry-After block (to publish it), and `merge_shared` adopts what
other replicas published, as relative durations ("open for 12 s"), so clocks never meet.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from gateway.routing.settings import BreakerConfig

BreakerState = Literal["closed", "open", "half_open"]


# The window is kept as counts per time bucket (window_seconds / _BUCKETS wide), so its memory
# does not grow with the request rate.
_BUCKETS = 60


@dataclass(slots=True)
class _Endpoint:
    buckets: deque[list[int]] = field(default_factory=deque)  # [bucket index, requests, failures]
    requests: int = 0
    failures: int = 0
    open_until: float | None = None  # set while open or half-open
    trials: list[float] = field(default_factory=list)  # start times of half-open trials
    blocked_until: float = 0.0  # upstream asked us to wait (Retry-After)


# (endpoint_id, open_for, blocked_for): open_for > 0 opened it, 0 closed it, None left it as it was;
# blocked_for > 0: the upstream asked to wait that long.
BreakerListener = Callable[[str, "float | None", float], None]

# A shared "not open" contradicts a local open with more than this left: another replica closed it.
_REMOTE_CLOSE_SLACK = 1.0


class CircuitBreaker:
    def __init__(
        self, config: BreakerConfig, listener: BreakerListener | None = None, *, max_block_s: float = 300.0
    ) -> None:
        self._cfg = config
        # The longest block an upstream's Retry-After (or another replica) may impose.
        self._max_block = max_block_s
        self.listener = listener
        self._bucket_seconds = config.window_seconds / _BUCKETS
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
            # Successes count too: the failure rate is over every request in the window.
            ep = self._endpoints[endpoint_id] = _Endpoint()
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            retry_after = min(retry_after, self._max_block)
            ep.blocked_until = max(ep.blocked_until, now + retry_after)
            self._tell(endpoint_id, None, retry_after)
        state = self.state(endpoint_id, now)
        if state == "half_open":
            if ok:
                self._endpoints[endpoint_id] = _Endpoint(blocked_until=ep.blocked_until)
                self._tell(endpoint_id, 0.0, 0.0)
            else:
                self._trip(ep, now)
                self._tell(endpoint_id, self._cfg.open_seconds, 0.0)
            return
        self._push(ep, ok, now)
        if state == "closed" and not ok and self._tripped(ep):
            self._trip(ep, now)
            self._tell(endpoint_id, self._cfg.open_seconds, 0.0)

    def merge_shared(self, endpoint_id: str, open_for: float, blocked_for: float, now: float) -> None:
        """Adopt another replica's view: open for `open_for` s (0: not open), blocked for `blocked_for` s."""
        ep = self._endpoints.get(endpoint_id)
        if open_for > 0:
            if ep is None:
                ep = self._endpoints[endpoint_id] = _Endpoint()
            if ep.open_until is None or now + open_for > ep.open_until + 1e-3:
                self._trip(ep, now)
                ep.open_until = now + open_for
        elif ep is not None and ep.open_until is not None and ep.open_until - now > _REMOTE_CLOSE_SLACK:
            self._endpoints[endpoint_id] = ep = _Endpoint(blocked_until=ep.blocked_until)
        if math.isfinite(blocked_for) and blocked_for > 0:
            if ep is None:
                ep = self._endpoints[endpoint_id] = _Endpoint()
            ep.blocked_until = max(ep.blocked_until, now + min(blocked_for, self._max_block))

    def shared_view(self, now: float) -> dict[str, tuple[float, float]]:
        """(open_for, blocked_for) of every endpoint that is open or blocked now: what to republish."""
        out = {}
        for endpoint_id, ep in self._endpoints.items():
            open_for = max(0.0, (ep.open_until or now) - now)
            blocked_for = max(0.0, ep.blocked_until - now)
            if open_for or blocked_for:
                out[endpoint_id] = (open_for, blocked_for)
        return out

    def _tell(self, endpoint_id: str, open_for: float | None, blocked_for: float) -> None:
        if self.listener is not None:
            self.listener(endpoint_id, open_for, blocked_for)

    def snapshot(self, now: float) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for endpoint_id, ep in self._endpoints.items():
            self._evict(ep, now)
            out[endpoint_id] = {
                "state": self.state(endpoint_id, now),
                "window_requests": ep.requests,
                "window_failures": ep.failures,
                "blocked_for_s": round(max(0.0, ep.blocked_until - now), 3),
                "open_for_s": round(max(0.0, (ep.open_until or now) - now), 3),
            }
        return out

    # -- internals ------------------------------------------------------------

    def _push(self, ep: _Endpoint, ok: bool, now: float) -> None:
        index = int(now // self._bucket_seconds)
        if ep.buckets and ep.buckets[-1][0] >= index:
            bucket = ep.buckets[-1]
        else:
            bucket = [index, 0, 0]
            ep.buckets.append(bucket)
        bucket[1] += 1
        ep.requests += 1
        if not ok:
            bucket[2] += 1
            ep.failures += 1
        self._evict(ep, now)

    def _evict(self, ep: _Endpoint, now: float) -> None:
        """Drop the buckets that ended before the window began."""
        horizon = (now - self._cfg.window_seconds) / self._bucket_seconds
        while ep.buckets and ep.buckets[0][0] + 1 <= horizon:
            _, requests, failures = ep.buckets.popleft()
            ep.requests -= requests
            ep.failures -= failures

    def _tripped(self, ep: _Endpoint) -> bool:
        n = ep.requests
        return n >= self._cfg.min_requests and ep.failures / n >= self._cfg.failure_rate

    def _trip(self, ep: _Endpoint, now: float) -> None:
        ep.open_until = now + self._cfg.open_seconds
        ep.trials = []
        ep.buckets.clear()
        ep.requests = 0
        ep.failures = 0

    def _live_trials(self, ep: _Endpoint, now: float) -> list[float]:
        # A trial that never reported back (cancelled) frees its slot after open_seconds.
        return [t for t in ep.trials if now - t < self._cfg.open_seconds]
