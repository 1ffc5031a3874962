"""The durable copy of stored Responses API responses (`responses.durable`): the state store's
`Archive` (`gateway.state_store.responses`) in the `stored_responses` table.

Written behind: `keep` only queues (bounded by bytes: past `max_pending_bytes` a response is not
archived, logged), and a periodic job upserts what is queued through the database's thread, so
no request waits on the database. A queued response is read from the queue (this replica sees its
own at once); a failed write keeps it queued for the next round. Reads (`fetch`, only when the
state store missed or is away) and deletes do go to the database, through the same thread pool.
Expired rows are never returned, and retention deletes them.

A forget always wins: its DELETE waits for an upsert in flight that holds the same response (on
another thread it could commit after the DELETE and bring the row back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, select

from gateway.persistence.engine import Database
from gateway.persistence.models import stored_responses
from gateway.persistence.requests import upsert
from gateway.persistence.types import utc

log = logging.getLogger("gateway.persistence")

# What may wait to be archived: past it (a database slow or away for long) responses go unarchived.
MAX_PENDING_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class _Queued:
    body: bytes
    expires_at: float


class ResponseArchive:
    def __init__(
        self,
        db: Database,
        *,
        max_pending_bytes: int,
        outages: tuple[type[BaseException], ...],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._max_pending = max_pending_bytes
        self._outages = outages
        self._wall = wall
        self._pending: dict[str, _Queued] = {}
        self._pending_bytes = 0
        self.dropped = 0
        # The upserts in flight and the keys each writes (`forget` waits for the ones with its key).
        self._writing: list[tuple[frozenset[str], asyncio.Future[None]]] = []

    def keep(self, key: str, body: bytes, ttl_s: float) -> None:
        self._drop_pending(key)
        if self._pending_bytes + len(body) > self._max_pending:
            self.dropped += 1
            log.warning("responses: the archive's queue is full (database slow or away); %s is not archived", key)
            return
        self._pending[key] = _Queued(body, self._wall() + ttl_s)
        self._pending_bytes += len(body)

    def _drop_pending(self, key: str) -> bool:
        queued = self._pending.pop(key, None)
        if queued is not None:
            self._pending_bytes -= len(queued.body)
        return queued is not None

    async def flush(self) -> int:
        """Write what is queued; returns how many. On failure they stay queued (unless replaced or
        forgotten meanwhile) and the error goes to the caller (the periodic job logs it)."""
        if not self._pending:
            return 0
        batch = dict(self._pending)
        rows = [{"key": k, "body": q.body, "expires_at": utc(q.expires_at)} for k, q in batch.items()]
        write = asyncio.ensure_future(self._db.run(_upsert, rows))
        entry = (frozenset(batch), write)
        self._writing.append(entry)
        write.add_done_callback(lambda done: self._written(entry))
        # Shielded: cancelling the flush (shutdown) does not stop the database's thread, so the
        # write stays in flight, and a forget waits for it, until that thread is done.
        await asyncio.shield(write)
        for key, queued in batch.items():
            if self._pending.get(key) is queued:  # not replaced or forgotten while it was written
                self._drop_pending(key)
        return len(rows)

    def _written(self, entry: tuple[frozenset[str], asyncio.Future[None]]) -> None:
        self._writing.remove(entry)
        write = entry[1]
        if not write.cancelled():
            write.exception()  # retrieved: a flush cancelled meanwhile no longer awaits it

    async def fetch(self, key: str) -> bytes | None:
        now = self._wall()
        queued = self._pending.get(key)
        if queued is not None:
            return queued.body if queued.expires_at > now else None
        try:
            return await self._db.run(_select, key, now)
        except self._outages as exc:
            log.warning("responses: the archive did not answer for %s: %s", key, exc)
            return None

    async def forget(self, key: str) -> bool:
        queued = self._drop_pending(key)
        writes = [write for keys, write in self._writing if key in keys]
        if writes:  # sent now, the DELETE could commit first and the upsert bring the row back
            await asyncio.wait(writes)
        try:
            return await self._db.run(_delete, key) or queued
        except self._outages as exc:
            log.warning("responses: could not delete %s from the archive: %s", key, exc)
            return queued


def _upsert(engine: Engine, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        stmt = upsert(conn, stored_responses)
        stmt = stmt.on_conflict_do_update(
            index_elements=["key"], set_={"body": stmt.excluded.body, "expires_at": stmt.excluded.expires_at}
        )
        for row in sorted(rows, key=lambda r: r["key"]):  # one order, so replicas lock rows alike
            conn.execute(stmt, row)


def _select(engine: Engine, key: str, now: float) -> bytes | None:
    t = stored_responses.c
    with engine.connect() as conn:
        body = conn.execute(select(t.body).where(t.key == key, t.expires_at > utc(now))).scalar_one_or_none()
    return bytes(body) if body is not None else None


def _delete(engine: Engine, key: str) -> bool:
    with engine.begin() as conn:
        return int(conn.execute(delete(stored_responses).where(stored_responses.c.key == key)).rowcount) > 0
