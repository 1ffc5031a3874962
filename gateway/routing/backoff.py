"""Retry delays: exponential backoff with jitter, honouring an upstream's Retry-After."""

from __future__ import annotations

import math
import random

from gateway.routing.settings import RetryConfig


def retry_delay(attempt: int, retry_after: float | None, cfg: RetryConfig, rng: random.Random) -> float | None:
    """Seconds to wait before retry number `attempt` (0-based) on the same endpoint.

    None means "do not wait for this endpoint": it asked for longer than `max_retry_after`,
    so the caller should move on to the next candidate.
    """
    if retry_after is not None and retry_after > cfg.max_retry_after:
        return None
    base = min(cfg.backoff_max, cfg.backoff_base * (2**attempt))
    delay: float = base * (0.5 + 0.5 * rng.random())
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay


def clamp_retry_after(value: float | None, limit: float) -> float | None:
    """An upstream's Retry-After as the gateway honours it: at most `limit` seconds (no upstream
    blocks an endpoint for good), None when it is not a finite number."""
    if value is None or not math.isfinite(value):
        return None
    return min(max(0.0, value), limit)
