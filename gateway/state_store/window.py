"""The sliding-window counter both backends implement: `BUCKETS` fixed buckets per window.

A window of 60 s is 12 buckets of 5 s; the count is the sum of the buckets that overlap the last
`window_s`, so the window slides in 5 s steps and memory is 12 pairs per key whatever the rate.
The Redis backend runs the same arithmetic in Lua (`redis.py`), on the server's clock.
"""

from __future__ import annotations

import math

from gateway.state_store.base import RateResult

BUCKETS = 12


class SlidingWindow:
    __slots__ = ("buckets",)

    def __init__(self) -> None:
        self.buckets: dict[int, list[int]] = {}  # bucket index -> [requests, tokens]

    def _trim(self, current: int) -> None:
        for index in [i for i in self.buckets if i <= current - BUCKETS]:
            del self.buckets[index]

    def usage(self, now: float, window_s: float) -> tuple[int, int]:
        width = window_s / BUCKETS
        self._trim(math.floor(now / width))
        return sum(b[0] for b in self.buckets.values()), sum(b[1] for b in self.buckets.values())

    def add(self, now: float, window_s: float, requests: int, tokens: int) -> None:
        width = window_s / BUCKETS
        current = math.floor(now / width)
        self._trim(current)
        bucket = self.buckets.setdefault(current, [0, 0])
        bucket[0] += requests
        bucket[1] += tokens

    def acquire(self, now: float, window_s: float, rpm: int | None, tpm: int | None, tokens: int) -> RateResult:
        width = window_s / BUCKETS
        current = math.floor(now / width)
        self._trim(current)
        requests = sum(b[0] for b in self.buckets.values())
        used = sum(b[1] for b in self.buckets.values())
        if (rpm is None or requests + 1 <= rpm) and (tpm is None or used + tokens <= tpm):
            bucket = self.buckets.setdefault(current, [0, 0])
            bucket[0] += 1
            bucket[1] += tokens
            return RateResult(True, requests + 1, used + tokens)
        return RateResult(False, requests, used, retry_after(self.buckets, now, width, rpm, tpm, tokens))


def retry_after(
    buckets: dict[int, list[int]], now: float, width: float, rpm: int | None, tpm: int | None, tokens: int
) -> float:
    """Seconds until enough old buckets leave the window for this request to fit."""
    requests = sum(b[0] for b in buckets.values())
    used = sum(b[1] for b in buckets.values())
    for index in sorted(buckets):
        requests -= buckets[index][0]
        used -= buckets[index][1]
        if (rpm is None or requests + 1 <= rpm) and (tpm is None or used + tokens <= tpm):
            return max(0.0, (index + BUCKETS) * width - now)
    return BUCKETS * width
