"""Teams in the database: a name, the same limits a key has (their budget binds all its keys
together), created, updated and deleted (only once no key belongs to it) by name."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.persistence.keys import KeyExists, TeamNotFound
from gateway.persistence.models import gateway_keys, teams
from gateway.persistence.types import utc

TEAM_COLUMNS = (
    "rpm_limit",
    "tpm_limit",
    "budget_usd",
    "max_parallel",
    "budget_period",
    "allowed_models",
    "expires_at",
    "metadata",
    "allowed_regions",
    "data_collection",
)


class TeamInUse(Exception):
    pass


@dataclass(frozen=True, slots=True)
class StoredTeam:
    name: str
    rpm_limit: int | None
    tpm_limit: int | None
    budget_usd: float | None
    max_parallel: int | None
    budget_period: str | None
    allowed_models: list[str] | None
    expires_at: datetime | None
    metadata: dict[str, Any] | None
    created_at: datetime
    allowed_regions: list[str] | None = None
    data_collection: str | None = None


_FIELDS = tuple(StoredTeam.__dataclass_fields__)


def _check(changes: dict[str, Any]) -> None:
    unknown = set(changes) - set(TEAM_COLUMNS)
    if unknown:
        raise TypeError(f"unknown team fields: {', '.join(sorted(unknown))}")


def create_team(engine: Engine, name: str, *, now: float | None = None, **limits: Any) -> None:
    _check(limits)
    try:
        with engine.begin() as conn:
            conn.execute(insert(teams), {"name": name, **limits, "created_at": utc(time.time() if now is None else now)})
    except IntegrityError:
        raise KeyExists(f"a team named {name!r} already exists") from None


def update_team(engine: Engine, name: str, **changes: Any) -> None:
    _check(changes)
    if not changes:
        get_team(engine, name)
        return
    with engine.begin() as conn:
        if conn.execute(update(teams).where(teams.c.name == name).values(**changes)).rowcount == 0:
            raise TeamNotFound(f"no team named {name!r}")


def delete_team(engine: Engine, name: str) -> None:
    with engine.begin() as conn:
        team_id = conn.execute(select(teams.c.id).where(teams.c.name == name)).scalar_one_or_none()
        if team_id is None:
            raise TeamNotFound(f"no team named {name!r}")
        members = conn.execute(select(func.count()).where(gateway_keys.c.team_id == team_id)).scalar_one()
        if members:
            raise TeamInUse(f"team {name!r} still has {members} key(s) (revoked ones included): move them first")
        conn.execute(delete(teams).where(teams.c.id == team_id))


def list_teams(engine: Engine) -> list[StoredTeam]:
    with engine.connect() as conn:
        rows = conn.execute(select(*(teams.c[f] for f in _FIELDS)).order_by(teams.c.name)).all()
    return [StoredTeam(*row) for row in rows]


def get_team(engine: Engine, name: str) -> StoredTeam:
    with engine.connect() as conn:
        row = conn.execute(select(*(teams.c[f] for f in _FIELDS)).where(teams.c.name == name)).one_or_none()
    if row is None:
        raise TeamNotFound(f"no team named {name!r}")
    return StoredTeam(*row)


def team_members(engine: Engine, name: str) -> list[str]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(gateway_keys.c.name).join(teams, gateway_keys.c.team_id == teams.c.id).where(teams.c.name == name)
        ).all()
    return [r[0] for r in rows]
