"""Failed admin authentications per client address (dashboard sign-in, admin bearer checks): past
`limit` failures within `window` seconds, the address is refused without its key being checked
until its oldest failure leaves the window. No I/O; time is passed in (monotonic seconds)."""

from __future__ import annotations

from collections import deque


class FailureLimiter:
    def __init__(self, limit: int, window: float = 60.0, max_addresses: int = 10_000) -> None:
        self.limit = limit
        self.window = window
        self.max_addresses = max_addresses
        self._failures: dict[str, deque[float]] = {}

    def retry_in(self, address: str, now: float) -> float | None:
        """Seconds until this address may try again, or None when it may try now."""
        times = self._failures.get(address)
        if times is None:
            return None
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self._failures[address]
            return None
        if len(times) < self.limit:
            return None
        return self.window - (now - times[0])

    def failed(self, address: str, now: float) -> None:
        times = self._failures.get(address)
        if times is None:
            while len(self._failures) >= self.max_addresses:  # the longest-known address goes first
                del self._failures[next(iter(self._failures))]
            times = self._failures[address] = deque(maxlen=self.limit)
        times.append(now)
