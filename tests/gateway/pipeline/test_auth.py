"""Authentication: bearer gateway keys (plain or sha256), and the separate admin key."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import AuthConfig, GatewayKey
from gateway.errors import AuthenticationFailed, PermissionDenied
from gateway.pipeline.auth import Authenticator

KEY = "sk-team-a-key-0001"
HASHED = "sk-team-b-key-0002"
ADMIN = "sk-admin-key-0003"


def authenticator(admin: str | None = ADMIN) -> Authenticator:
    return Authenticator(
        AuthConfig(
            keys=(
                GatewayKey(name="team-a", key=KEY),  # type: ignore[arg-type]
                GatewayKey(name="team-b", key="sha256:" + hashlib.sha256(HASHED.encode()).hexdigest()),  # type: ignore[arg-type]
            ),
            admin_key=admin,  # type: ignore[arg-type]
        )
    )


def test_open_access_without_keys() -> None:
    auth = Authenticator(AuthConfig())
    assert auth.open_access
    assert auth.authenticate(None) is None
    assert auth.authenticate("Bearer anything") is None


def test_plain_and_hashed_keys() -> None:
    auth = authenticator()
    assert not auth.open_access
    assert auth.authenticate(f"Bearer {KEY}") == "team-a"
    assert auth.authenticate(f"bearer   {HASHED}  ") == "team-b"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", f"Basic {KEY}", KEY])
def test_missing_key(header: str | None) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        authenticator().authenticate(header)
    assert "didn't provide an API key" in info.value.message
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"


@pytest.mark.parametrize(
    "token", ["sk-wrong", KEY + "x", "sha256:" + hashlib.sha256(HASHED.encode()).hexdigest(), ADMIN]
)
def test_wrong_key(token: str) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        authenticator().authenticate(f"Bearer {token}")
    assert info.value.message == "Incorrect API key provided."
    assert token not in info.value.message


def test_admin() -> None:
    auth = authenticator()
    assert auth.admin_enabled
    auth.authenticate_admin(f"Bearer {ADMIN}")
    with pytest.raises(PermissionDenied):
        auth.authenticate_admin(f"Bearer {KEY}")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate_admin("Bearer sk-nobody")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate_admin(None)


def test_admin_disabled() -> None:
    auth = authenticator(admin=None)
    assert not auth.admin_enabled
    with pytest.raises(PermissionDenied) as info:
        auth.authenticate_admin(f"Bearer {ADMIN}")
    assert "disabled" in info.value.message


def test_add_key() -> None:
    auth = authenticator()
    auth.add_key(hashlib.sha256(b"sk-new-key-999").hexdigest(), "new")
    assert auth.authenticate("Bearer sk-new-key-999") == "new"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_a_revoked_stored_key_fails_at_once_even_after_it_passed() -> None:
    auth = authenticator()
    auth.set_stored_keys({digest("sk-stored-1"): "stored"}, any_defined=True)
    assert auth.authenticate("Bearer sk-stored-1") == "stored"
    assert auth.authenticate("Bearer sk-stored-1") == "stored"  # remembered as passed
    auth.set_stored_keys({}, any_defined=True)
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("Bearer sk-stored-1")
    assert auth.authenticate(f"Bearer {KEY}") == "team-a"  # config keys stay


def test_only_passing_headers_are_remembered_and_the_memory_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.pipeline.auth as auth_module

    monkeypatch.setattr(auth_module, "PASSED_CAP", 3)
    auth = authenticator()
    for i in range(10):
        with pytest.raises(AuthenticationFailed):
            auth.authenticate(f"Bearer sk-wrong-{i}")
    assert len(auth._passed) == 0
    for i in range(10):
        auth.add_key(digest(f"sk-many-{i}"), f"many-{i}")
    for i in range(10):
        assert auth.authenticate(f"Bearer sk-many-{i}") == f"many-{i}"
        assert len(auth._passed) <= 3
