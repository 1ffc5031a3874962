"""Build the limiter for an app: its store follows `state_store.backend`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from gateway.limits.settings import LimiterSettings
from gateway.limits.stage import Limiter
from gateway.limits.store import LimitStore, MemoryLimitStore
from gateway.state_store.config import StateStoreConfig
from kernel.deployment import Price


class WiringSettings(LimiterSettings, Protocol):
    @property
    def state_store(self) -> StateStoreConfig: ...


def open_limit_store(cfg: StateStoreConfig) -> LimitStore:
    """The counters live where the shared routing state does: Redis across replicas, or memory."""
    if cfg.backend == "redis":
        from gateway.limits.redis_store import RedisLimitStore

        return RedisLimitStore(cfg.url, prefix=f"{cfg.key_prefix}lim:", timeout=cfg.timeout_s)
    return MemoryLimitStore()


def build_limiter(
    settings: WiringSettings,
    prices: Callable[[str], Price | None],
    *,
    store: LimitStore | None = None,
    wall: Callable[[], float] = time.time,
    regions: Iterable[str] = (),
) -> Limiter:
    """`regions`: the catalog's endpoint regions, which keys' region patterns are matched against."""
    return Limiter(settings, store or open_limit_store(settings.state_store), prices, wall=wall, regions=regions)

