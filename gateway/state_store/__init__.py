"""Shared routing state: the `StateStore` interface and its backends (name -> factory)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from gateway.state_store.base import StateStore, StoreUnavailable
from gateway.state_store.config import StateStoreConfig
from gateway.state_store.memory import MemoryStore


def _memory(cfg: StateStoreConfig, clock: Callable[[], float]) -> StateStore:
    return MemoryStore(clock)


def _redis(cfg: StateStoreConfig, clock: Callable[[], float]) -> StateStore:
    from gateway.state_store.redis import RedisStore

    return RedisStore(cfg.url, prefix=cfg.key_prefix, timeout=cfg.timeout_s)


BACKENDS: Mapping[str, Callable[[StateStoreConfig, Callable[[], float]], StateStore]] = {
    "memory": _memory,
    "redis": _redis,
}


def open_store(cfg: StateStoreConfig, clock: Callable[[], float] = time.monotonic) -> StateStore:
    return BACKENDS[cfg.backend](cfg, clock)


__all__ = ["BACKENDS", "MemoryStore", "StateStore", "StoreUnavailable", "open_store"]
