"""Frozen probe baselines per (endpoint, probe, key): read, write (replacing a declared
rebaseline), forget. Plain functions of an engine, run off the event loop by `Database.run`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.exc import IntegrityError

from gateway.persistence.engine import Database
from gateway.persistence.models import probe_baselines
from gateway.persistence.types import utc


def get_baseline(engine: Engine, endpoint_id: str, probe: str, key: str) -> dict[str, Any] | None:
    t = probe_baselines.c
    q = select(t.data).where(t.endpoint_id == endpoint_id, t.probe == probe, t.key == key)
    with engine.connect() as conn:
        data = conn.execute(q).scalar_one_or_none()
    return dict(data) if data is not None else None


def put_baseline(engine: Engine, endpoint_id: str, probe: str, key: str, data: Mapping[str, Any], *, at: float) -> None:
    """Insert, or replace the stored one (another replica may have inserted it a moment ago)."""
    t = probe_baselines.c
    values = {"data": dict(data), "created_at": utc(at)}
    where = (t.endpoint_id == endpoint_id, t.probe == probe, t.key == key)
    with engine.begin() as conn:
        if conn.execute(update(probe_baselines).where(*where).values(**values)).rowcount:
            return
    try:
        with engine.begin() as conn:
            conn.execute(probe_baselines.insert().values(endpoint_id=endpoint_id, probe=probe, key=key, **values))
    except IntegrityError:  # lost the race to insert: replace what the other writer stored
        with engine.begin() as conn:
            conn.execute(update(probe_baselines).where(*where).values(**values))


def clear_baselines(engine: Engine, endpoint_id: str, probe: str | None = None) -> int:
    t = probe_baselines.c
    q = delete(probe_baselines).where(t.endpoint_id == endpoint_id)
    if probe is not None:
        q = q.where(t.probe == probe)
    with engine.begin() as conn:
        return int(conn.execute(q).rowcount or 0)


class SqlBaselines:
    """Baselines in the database (`probe_baselines`), shared by every replica and kept across
    restarts; each call runs off the event loop. Implements `probes.baselines.BaselineStore`."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def get(self, endpoint_id: str, probe: str, key: str) -> Mapping[str, Any] | None:
        return await self._db.run(get_baseline, endpoint_id, probe, key)

    async def put(self, endpoint_id: str, probe: str, key: str, data: Mapping[str, Any], *, at: float) -> None:
        await self._db.run(put_baseline, endpoint_id, probe, key, data, at=at)

    async def clear(self, endpoint_id: str, probe: str | None = None) -> int:
        return await self._db.run(clear_baselines, endpoint_id, probe)
