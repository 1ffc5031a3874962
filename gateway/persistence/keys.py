"""Gateway keys in the database: created with a random secret that is shown once, stored as its
sha256 digest (the same form `Authenticator` compares), updated, rotated (a new secret, the same
name, limits and spend) and revoked by name. A key may belong to a team (`teams`)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.persistence.models import gateway_keys, teams
from gateway.persistence.types import utc
from gateway.pipeline.settings import key_digest

KEY_PREFIX = "sk-gw-"
# The limit columns `update_key` may set (and `create_key` takes), besides the team.
LIMIT_COLUMNS = (
    "owner",
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


class KeyExists(Exception):
    pass


class KeyNotFound(Exception):
    pass


class TeamNotFound(KeyNotFound):
    pass


@dataclass(frozen=True, slots=True)
class StoredKey:
    name: str
    prefix: str
    owner: str | None
    rpm_limit: int | None
    tpm_limit: int | None
    budget_usd: float | None
    created_at: datetime
    revoked_at: datetime | None
    team: str | None = None
    max_parallel: int | None = None
    budget_period: str | None = None
    allowed_models: list[str] | None = None
    expires_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    rotated_at: datetime | None = None
    allowed_regions: list[str] | None = None
    data_collection: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


_FIELDS = tuple(StoredKey.__dataclass_fields__)


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _team_id(conn: Connection, team: str | None) -> int | None:
    if team is None:
        return None
    found = conn.execute(select(teams.c.id).where(teams.c.name == team)).scalar_one_or_none()
    if found is None:
        raise TeamNotFound(f"no team named {team!r} (create it with `gwctl teams create {team}`)")
    return int(found)


def create_key(
    engine: Engine,
    name: str,
    *,
    team: str | None = None,
    now: float | None = None,
    **limits: Any,
) -> str:
    """Store a new key and return its secret: the only time it is ever seen. `limits`: any of
    LIMIT_COLUMNS."""
    unknown = set(limits) - set(LIMIT_COLUMNS)
    if unknown:
        raise TypeError(f"unknown key fields: {', '.join(sorted(unknown))}")
    secret = new_secret()
    row = {
        "name": name,
        "digest": key_digest(secret),
        "prefix": secret[: len(KEY_PREFIX) + 4],
        **limits,
        "created_at": utc(time.time() if now is None else now),
    }
    try:
        with engine.begin() as conn:
            row["team_id"] = _team_id(conn, team)
            conn.execute(insert(gateway_keys), row)
    except IntegrityError:
        raise KeyExists(f"a key named {name!r} already exists (names stay taken after revocation)") from None
    return secret


def _missing(conn: Connection, name: str) -> KeyNotFound:
    exists = conn.execute(select(func.count()).where(gateway_keys.c.name == name)).scalar_one()
    return KeyNotFound(f"key {name!r} is revoked" if exists else f"no key named {name!r}")


def update_key(engine: Engine, name: str, *, team: str | None | object = ..., **changes: Any) -> None:
    """Change an active key's limits (a value of None clears that limit); `team=None` leaves its team."""
    unknown = set(changes) - set(LIMIT_COLUMNS)
    if unknown:
        raise TypeError(f"unknown key fields: {', '.join(sorted(unknown))}")
    with engine.begin() as conn:
        values = dict(changes)
        if team is not ...:
            values["team_id"] = _team_id(conn, team)  # type: ignore[arg-type]
        if not values:
            return
        active = (gateway_keys.c.name == name) & gateway_keys.c.revoked_at.is_(None)
        if conn.execute(update(gateway_keys).where(active).values(**values)).rowcount == 0:
            raise _missing(conn, name)


def rotate_key(engine: Engine, name: str, *, now: float | None = None) -> str:
    """A new secret for an active key; the old one stops working at the gateways' next refresh."""
    secret = new_secret()
    with engine.begin() as conn:
        active = (gateway_keys.c.name == name) & gateway_keys.c.revoked_at.is_(None)
        values = {
            "digest": key_digest(secret),
            "prefix": secret[: len(KEY_PREFIX) + 4],
            "rotated_at": utc(time.time() if now is None else now),
        }
        if conn.execute(update(gateway_keys).where(active).values(**values)).rowcount == 0:
            raise _missing(conn, name)
    return secret


def revoke_key(engine: Engine, name: str, *, now: float | None = None) -> None:
    with engine.begin() as conn:
        result = conn.execute(
            update(gateway_keys)
            .where(gateway_keys.c.name == name, gateway_keys.c.revoked_at.is_(None))
            .values(revoked_at=utc(time.time() if now is None else now))
        )
        if result.rowcount == 0:
            exists = conn.execute(select(func.count()).where(gateway_keys.c.name == name)).scalar_one()
            raise KeyNotFound(f"key {name!r} is already revoked" if exists else f"no key named {name!r}")


def _select() -> Any:
    cols = [gateway_keys.c[f] if f != "team" else teams.c.name.label("team") for f in _FIELDS]
    return select(*cols).select_from(gateway_keys.outerjoin(teams, gateway_keys.c.team_id == teams.c.id))


def list_keys(engine: Engine) -> list[StoredKey]:
    with engine.connect() as conn:
        rows = conn.execute(_select().order_by(gateway_keys.c.created_at, gateway_keys.c.id)).mappings().all()
    return [StoredKey(**{f: row[f] for f in _FIELDS}) for row in rows]


def get_key(engine: Engine, name: str) -> StoredKey:
    with engine.connect() as conn:
        row = conn.execute(_select().where(gateway_keys.c.name == name)).mappings().one_or_none()
    if row is None:
        raise KeyNotFound(f"no key named {name!r}")
    return StoredKey(**{f: row[f] for f in _FIELDS})


@dataclass(frozen=True, slots=True)
class KeySet:
    """What the authenticator needs: active digests -> names, and whether any key was ever stored
    (then the gateway is never open, even with every key revoked); and for the limiter, every key
    (revoked ones too: their spend still counts for their team) by name."""

    active: dict[str, str]
    any_defined: bool
    keys: dict[str, StoredKey] | None = None


def load_keys(engine: Engine) -> KeySet:
    with engine.connect() as conn:
        rows = conn.execute(_select().add_columns(gateway_keys.c.digest)).mappings().all()
    stored = {row["name"]: StoredKey(**{f: row[f] for f in _FIELDS}) for row in rows}
    active = {row["digest"]: row["name"] for row in rows if row["revoked_at"] is None}
    return KeySet(active=active, any_defined=bool(rows), keys=stored)
