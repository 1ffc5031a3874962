"""Build the limiter for an app: its store follows `state_store.backend`."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config import Price, Settings
from gateway.limits.stage import Limiter
from gateway.limits.store import LimitStore, MemoryLimitStore


def open_limit_store(settings: Settings) -> LimitStore:
    """The counters live where the shared routing state does: Redis across replicas, or memory."""
    cfg = settings.state_store
    if cfg.backend == "redis":
        from gateway.limits.redis_store import RedisLimitStore

        return RedisLimitStore(cfg.url, prefix=f"{cfg.key_prefix}lim:", timeout=cfg.timeout_s)
    return MemoryLimitStore()


def build_limiter(
    settings: Settings,
    prices: Callable[[str], Price | None],
    *,
    store: LimitStore | None = None,
    wall: Callable[[], float] = time.time,
) -> Limiter:
    return Limiter(settings, store or open_limit_store(settings), prices, wall=wall)

