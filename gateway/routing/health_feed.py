"""Health states through the state store: the sink that publishes each transition as it happens,
and the records the sync loop pulls back for `HealthStates.apply`.

A transition is published at once (so another replica has it by its next sync, within one
`sync_interval_s`); while the store is away it waits here, and the sync loop pushes it when the
store answers again, with every other local state (the store may have lost them). The store keeps a
record only when it orders after the stored one (`order_key`), so a stale state, replayed late or
made on a view that had not yet seen an operator's action, never replaces a newer one; the
replica whose record was refused adopts the store's at its next pull.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.state_store.base import StateStore, StoreUnavailable
from kernel.health import STATES, EndpointHealth, Transition, order_key

log = logging.getLogger("gateway.state")


def encode(entry: EndpointHealth) -> bytes:
    return orjson.dumps(
        {
            "state": entry.state,
            "manual": entry.manual,
            "score": entry.score,
            "source": entry.source,
            "reason": entry.reason,
            "since": entry.since,
            "operator_at": entry.operator_at,
        }
    )


def decode(record: bytes) -> EndpointHealth:
    """ValueError for a record this version cannot read."""
    try:
        data: Any = orjson.loads(record)
        state = data["state"]
        if state not in STATES:
            raise ValueError(f"unknown health state {state!r}")
        score = data["score"]
        return EndpointHealth(
            state=state,
            manual=bool(data["manual"]),
            score=None if score is None else float(score),
            source=str(data["source"]),
            reason=str(data["reason"]),
            since=float(data["since"]),
            operator_at=float(data["operator_at"]),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable health record: {exc}") from None


class HealthFeed:
    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._pending: dict[str, EndpointHealth] = {}  # not in the store yet: it was away
        # The last record read of each endpoint, decoded (None: unreadable, said once).
        self._decoded: dict[str, tuple[bytes, EndpointHealth | None]] = {}
        self.refused = 0  # publishes the store kept out: it held a state that orders after ours

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def __call__(self, t: Transition, *, actor: str | None = None, action: str | None = None) -> bool:
        """The sink: publish now; while the store is away, queue it for the sync loop."""
        entry = t.entry()
        if self._pending:  # the store failed at the last try: no new wait, the loop retries
            self._queue(t.endpoint_id, entry)
            return False
        try:
            await self._put(t.endpoint_id, entry)
        except StoreUnavailable as exc:
            log.warning("health: the %s state of %s waits for the state store (%s)", entry.state, t.endpoint_id, exc)
            self._queue(t.endpoint_id, entry)
            return False
        return True

    def republish(self, states: Mapping[str, EndpointHealth]) -> None:
        """Queue these states for the next push (after an outage: the store may have lost them)."""
        for endpoint_id, entry in states.items():
            self._queue(endpoint_id, entry)

    def _queue(self, endpoint_id: str, entry: EndpointHealth) -> None:
        old = self._pending.get(endpoint_id)
        if old is None or order_key(entry) >= order_key(old):
            self._pending[endpoint_id] = entry

    async def push(self) -> None:
        """Publish what is queued. StoreUnavailable leaves the rest queued."""
        while self._pending:
            endpoint_id, entry = next(iter(self._pending.items()))
            await self._put(endpoint_id, entry)
            if self._pending.get(endpoint_id) is entry:  # a newer one may have come meanwhile
                del self._pending[endpoint_id]

    async def _put(self, endpoint_id: str, entry: EndpointHealth) -> None:
        if not await self._store.health_publish(endpoint_id, order_key(entry), encode(entry)):
            self.refused += 1

    async def pull(self) -> dict[str, EndpointHealth]:
        """Every endpoint's stored state (decoding only the records that changed)."""
        out = {}
        for endpoint_id, record in (await self._store.health_read()).items():
            cached = self._decoded.get(endpoint_id)
            if cached is not None and cached[0] == record:
                entry = cached[1]
            else:
                try:
                    entry = decode(record)
                except ValueError as exc:
                    log.warning("health: skipping the stored state of %s: %s", endpoint_id, exc)
                    entry = None
                self._decoded[endpoint_id] = (record, entry)
            if entry is not None:
                out[endpoint_id] = entry
        return out
