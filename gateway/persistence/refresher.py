"""Pull the database's gateway keys and endpoint states into memory, so a key created or revoked
with `gwctl keys`, or an endpoint demoted on another replica, takes effect here within
`persistence.refresh_interval` seconds. The request path only ever reads the in-memory copies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from gateway.health_states import HealthStates
from gateway.persistence.engine import Database
from gateway.persistence.health import load_states
from gateway.persistence.key_limits import Loaded, config_seeds, load_records
from gateway.pipeline.auth import Authenticator
from kernel.health import EndpointHealth


def _load(engine: Engine, now: float) -> tuple[Loaded, dict[str, EndpointHealth]]:
    return load_records(engine, now), load_states(engine)


class Refresher:
    def __init__(
        self,
        db: Database,
        auth: Authenticator,
        health: HealthStates,
        *,
        timeout: float,
        limits: Any = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`limits`: the limiter (gateway.limits.Limiter) that takes the keys' limits and recorded spend."""
        self._db = db
        self._limits = limits
        self._wall = wall
        self._auth = auth
        self._health = health
        self._timeout = timeout
        self.rounds = 0

    async def refresh(self) -> None:
        """Raises TimeoutError past `timeout` (a half-open connection must not hold the keys' age
        at its last success while looking busy); the query's thread finishes on its own."""
        loaded, states = await asyncio.wait_for(self._db.run(_load, self._wall()), self._timeout)
        if self._limits is not None:  # before the keys: a new key is never served without its limits
            self._limits.set_stored(loaded.records)
            self._limits.set_config_seeds(config_seeds(loaded.book, self._limits.config_records))
        self._auth.set_stored_keys(loaded.keys.active)
        self._health.apply(states)
        self.rounds += 1
