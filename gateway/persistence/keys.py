"""Gateway keys in the database: created with a random secret that is shown once, stored as its
sha256 digest (the same form `Authenticator` compares), revoked by name."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from gateway.persistence.models import gateway_keys
from gateway.persistence.types import utc
from gateway.pipeline.settings import key_digest

KEY_PREFIX = "sk-gw-"


class KeyExists(Exception):
    pass


class KeyNotFound(Exception):
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

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(
    engine: Engine,
    name: str,
    *,
    owner: str | None = None,
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
    budget_usd: float | None = None,
    now: float | None = None,
) -> str:
    """Store a new key and return its secret: the only time it is ever seen."""
    secret = new_secret()
    row = {
        "name": name,
        "digest": key_digest(secret),
        "prefix": secret[: len(KEY_PREFIX) + 4],
        "owner": owner,
        "rpm_limit": rpm_limit,
        "tpm_limit": tpm_limit,
        "budget_usd": budget_usd,
        "created_at": utc(time.time() if now is None else now),
    }
    try:
        with engine.begin() as conn:
            conn.execute(insert(gateway_keys), row)
    except IntegrityError:
        raise KeyExists(f"a key named {name!r} already exists (names stay taken after revocation)") from None
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


def list_keys(engine: Engine) -> list[StoredKey]:
    cols = [gateway_keys.c[f.name] for f in fields(StoredKey)]
    with engine.connect() as conn:
        rows = conn.execute(select(*cols).order_by(gateway_keys.c.created_at, gateway_keys.c.id)).all()
    return [StoredKey(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class KeySet:
    """What the authenticator needs: active digests -> names, and whether any key was ever stored
    (then the gateway is never open, even with every key revoked)."""

    active: dict[str, str]
    any_defined: bool


def load_keys(engine: Engine) -> KeySet:
    with engine.connect() as conn:
        rows = conn.execute(select(gateway_keys.c.digest, gateway_keys.c.name, gateway_keys.c.revoked_at)).all()
    return KeySet(active={d: n for d, n, revoked in rows if revoked is None}, any_defined=bool(rows))
