"""Providers and deployments as configured, kept in sync at start-up, with their history.

Each row carries its config (secrets left out) and a hash of it; a sync adds, updates, marks
removed or restores rows and writes one `config_history` row per change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, Table, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.catalog import Endpoint
from gateway.persistence.config import PersistenceSettings
from gateway.persistence.models import config_history, deployments, providers
from gateway.persistence.types import utc


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    config: dict[str, Any]
    columns: dict[str, Any]  # the table's extra columns (kind; model, provider)

    @property
    def digest(self) -> str:
        return hashlib.sha256(orjson.dumps(self.config, option=orjson.OPT_SORT_KEYS)).hexdigest()


def provider_entries(settings: PersistenceSettings) -> list[Entry]:
    entries = []
    for p in settings.providers:
        config = p.model_dump(mode="json", exclude={"api_key", "headers"})
        config["header_names"] = sorted(p.headers)  # values may be credentials
        entries.append(Entry(p.name, config, {"kind": p.kind}))
    for e in settings.engines:
        config = e.model_dump(mode="json", exclude={"base_port"})
        entries.append(Entry(e.name, config, {"kind": e.kind}))
    return entries


def deployment_entries(endpoints: Iterable[Endpoint]) -> list[Entry]:
    return [
        Entry(
            ep.id,
            {**ep.deployment.model_dump(mode="json"), "region": ep.region, "kind": ep.kind},
            {"model": ep.model, "provider": ep.provider},
        )
        for ep in endpoints
    ]


@dataclass(frozen=True, slots=True)
class SyncResult:
    added: int = 0
    changed: int = 0
    removed: int = 0
    restored: int = 0


def sync_catalog(
    engine: Engine, settings: PersistenceSettings, endpoints: Iterable[Endpoint], now: float
) -> dict[str, SyncResult]:
    """Bring both tables in line with the config. Replicas starting together may race: on a
    conflict the sync is retried once against what the other replica wrote."""
    items = {"provider": provider_entries(settings), "deployment": deployment_entries(endpoints)}
    for attempt in range(2):
        try:
            with engine.begin() as conn:
                return {
                    "providers": _sync(conn, providers, "name", "provider", items["provider"], now),
                    "deployments": _sync(conn, deployments, "endpoint_id", "deployment", items["deployment"], now),
                }
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def _sync(conn: Connection, table: Table, key: str, entity: str, entries: list[Entry], now: float) -> SyncResult:
    at = utc(now)
    col = table.c[key]
    existing: Mapping[str, Any] = {
        row[0]: row for row in conn.execute(select(col, table.c.config_hash, table.c.removed_at, table.c.config))
    }
    seen = set()
    added = changed = restored = removed = 0
    history = []
    for entry in entries:
        seen.add(entry.name)
        values = {**entry.columns, "config": entry.config, "config_hash": entry.digest, "last_seen": at}
        row = existing.get(entry.name)
        if row is None:
            conn.execute(insert(table).values({key: entry.name, "first_seen": at, **values}))
            history.append((entry.name, "added", entry.config))
            added += 1
            continue
        change = "restored" if row.removed_at is not None else "changed" if row.config_hash != entry.digest else None
        conn.execute(update(table).where(col == entry.name).values(removed_at=None, **values))
        if change:
            history.append((entry.name, change, entry.config))
            restored += change == "restored"
            changed += change == "changed"
    for name, row in existing.items():
        if name not in seen and row.removed_at is None:
            conn.execute(update(table).where(col == name).values(removed_at=at))
            history.append((name, "removed", row.config))
            removed += 1
    if history:
        conn.execute(
            insert(config_history),
            [{"at": at, "entity": entity, "name": n, "change": c, "config": cfg} for n, c, cfg in history],
        )
    return SyncResult(added=added, changed=changed, removed=removed, restored=restored)
