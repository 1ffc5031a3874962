"""Pull the database's gateway keys and endpoint states into memory, so a key created or revoked
with `gwctl keys`, or an endpoint demoted on another replica, takes effect here within
`persistence.refresh_interval` seconds. The request path only ever reads the in-memory copies."""

from __future__ import annotations

import asyncio

from sqlalchemy import Engine

from gateway.health_states import HealthStates
from gateway.persistence.engine import Database
from gateway.persistence.health import load_states
from gateway.persistence.keys import KeySet, load_keys
from gateway.pipeline.auth import Authenticator
from kernel.health import EndpointHealth


def _load(engine: Engine) -> tuple[KeySet, dict[str, EndpointHealth]]:
    return load_keys(engine), load_states(engine)


class Refresher:
    def __init__(self, db: Database, auth: Authenticator, health: HealthStates, *, timeout: float) -> None:
        self._db = db
        self._auth = auth
        self._health = health
        self._timeout = timeout
        self.rounds = 0

    async def refresh(self) -> None:
        """Raises TimeoutError past `timeout` (a half-open connection must not hold the keys' age
        at its last success while looking busy); the query's thread finishes on its own."""
        keys, states = await asyncio.wait_for(self._db.run(_load), self._timeout)
        self._auth.set_stored_keys(keys.active)
        self._health.apply(states)
        self.rounds += 1
