"""Gateway keys in the database, and the authenticator taking them up (revocations included)."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, select

from gateway.persistence import keys
from gateway.persistence.models import gateway_keys
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.settings import AuthConfig, GatewayKey
from kernel.errors import AuthenticationFailed, PermissionDenied


def bearer(secret: str) -> str:
    return f"Bearer {secret}"


def test_create_stores_only_the_digest(engine: Engine) -> None:
    secret = keys.create_key(engine, "alice", owner="team-a", rpm_limit=60, tpm_limit=10_000, budget_usd=25.0)
    assert secret.startswith("sk-gw-") and len(secret) > 40
    with engine.connect() as conn:
        row = conn.execute(select(gateway_keys)).mappings().one()
    assert row["digest"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(dict(row))
    assert row["prefix"] == secret[:10]
    (stored,) = keys.list_keys(engine)
    assert (stored.name, stored.owner, stored.rpm_limit, stored.tpm_limit, stored.budget_usd) == (
        "alice",
        "team-a",
        60,
        10_000,
        25.0,
    )
    assert stored.active and stored.created_at.tzinfo is not None


def test_names_are_unique(engine: Engine) -> None:
    keys.create_key(engine, "alice")
    with pytest.raises(keys.KeyExists):
        keys.create_key(engine, "alice")


def test_revoke(engine: Engine) -> None:
    secret = keys.create_key(engine, "alice")
    keys.create_key(engine, "bob")
    keys.revoke_key(engine, "alice")
    loaded = keys.load_keys(engine)
    assert set(loaded.active.values()) == {"bob"}
    assert hashlib.sha256(secret.encode()).hexdigest() not in loaded.active
    assert loaded.any_defined
    assert [k.active for k in keys.list_keys(engine)] == [False, True]
    with pytest.raises(keys.KeyNotFound, match="already revoked"):
        keys.revoke_key(engine, "alice")
    with pytest.raises(keys.KeyNotFound, match="no key named"):
        keys.revoke_key(engine, "carol")


def test_empty_table_means_no_keys_defined(engine: Engine) -> None:
    loaded = keys.load_keys(engine)
    assert loaded.active == {} and not loaded.any_defined


def test_authenticator_takes_stored_keys_and_revocations(engine: Engine) -> None:
    auth = Authenticator(
        AuthConfig(
            keys=(GatewayKey(name="cfg", key=SecretStr("sk-config-key-1")),), admin_key=SecretStr("sk-admin-key-0001")
        ),
        open_access=False,
        stored=True,
    )
    secret = keys.create_key(engine, "alice")
    loaded = keys.load_keys(engine)
    auth.set_stored_keys(loaded.active)
    assert auth.authenticate(bearer(secret)) == "alice"
    assert auth.authenticate(bearer("sk-config-key-1")) == "cfg"  # config keys keep working
    with pytest.raises(PermissionDenied):
        auth.authenticate_admin(bearer(secret))  # a gateway key is not the admin key

    keys.revoke_key(engine, "alice")
    loaded = keys.load_keys(engine)
    auth.set_stored_keys(loaded.active)
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(bearer(secret))
    assert auth.authenticate(bearer("sk-config-key-1")) == "cfg"


def test_revoking_every_stored_key_does_not_open_the_api() -> None:
    auth = Authenticator(AuthConfig(), open_access=False, stored=True)
    auth.set_stored_keys({"a" * 64: "alice"})
    assert not auth.open_access
    auth.set_stored_keys({})  # all revoked
    assert not auth.open_access
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(None)


def test_added_keys_survive_a_refresh() -> None:
    auth = Authenticator(AuthConfig(), open_access=False, stored=True)
    auth.add_key(hashlib.sha256(b"sk-added-key-1").hexdigest(), "added")
    auth.set_stored_keys({})
    assert auth.authenticate(bearer("sk-added-key-1")) == "added"
