"""Authentication: bearer gateway keys (plain or sha256), and the separate admin key."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import load_config
from gateway.pipeline.auth import Authenticator, open_bind_problem, open_by_config
from gateway.pipeline.settings import AuthConfig, GatewayKey
from kernel.errors import AuthenticationFailed, KeyStoreUnavailable, PermissionDenied

KEY = "sk-team-a-key-0001"
HASHED = "sk-team-b-key-0002"
ADMIN = "sk-admin-key-0003"


def authenticator(admin: str | None = ADMIN, **kwargs: object) -> Authenticator:
    return Authenticator(
        AuthConfig(
            keys=(
                GatewayKey(name="team-a", key=KEY),  # type: ignore[arg-type]
                GatewayKey(name="team-b", key="sha256:" + hashlib.sha256(HASHED.encode()).hexdigest()),  # type: ignore[arg-type]
            ),
            admin_key=admin,  # type: ignore[arg-type]
        ),
        open_access=False,
        **kwargs,  # type: ignore[arg-type]
    )


def test_open_access_without_keys() -> None:
    auth = Authenticator(AuthConfig(), open_access=True)
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
    auth = authenticator(stored=True)
    auth.set_stored_keys({digest("sk-stored-1"): "stored"})
    assert auth.authenticate("Bearer sk-stored-1") == "stored"
    assert auth.authenticate("Bearer sk-stored-1") == "stored"  # remembered as passed
    auth.set_stored_keys({})
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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_stored_keys_are_unavailable_until_the_first_load_and_config_keys_work() -> None:
    auth = authenticator(stored=True, clock=Clock())
    assert not auth.open_access and not auth.store_usable
    with pytest.raises(KeyStoreUnavailable) as info:
        auth.authenticate("Bearer sk-stored-1")
    assert (info.value.status_code, info.value.code) == (503, "key_store_unavailable")
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(None)  # no key at all is still a 401, never open
    assert auth.authenticate(f"Bearer {KEY}") == "team-a"
    assert auth.status()["key_store"] == "unavailable" and "not loaded" in auth.status()["reason"]


def test_an_empty_store_does_not_open_the_api() -> None:
    auth = Authenticator(AuthConfig(), open_access=False, stored=True, clock=Clock())
    auth.set_stored_keys({})
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(None)
    with pytest.raises(AuthenticationFailed):
        auth.authenticate("Bearer anything-at-all")


def test_stored_keys_past_the_maximum_staleness_are_refused_config_keys_still_work() -> None:
    clock = Clock()
    auth = Authenticator(
        AuthConfig(keys=(GatewayKey(name="team-a", key=KEY),), max_key_staleness_s=60),  # type: ignore[arg-type]
        open_access=False,
        stored=True,
        clock=clock,
    )
    auth.set_stored_keys({digest("sk-stored-1"): "stored"})
    assert auth.authenticate("Bearer sk-stored-1") == "stored"
    clock.now += 59
    assert auth.authenticate("Bearer sk-stored-1") == "stored"  # the remembered header too
    clock.now += 2
    with pytest.raises(KeyStoreUnavailable, match="61 s"):
        auth.authenticate("Bearer sk-stored-1")  # remembered as passed, refused all the same
    with pytest.raises(KeyStoreUnavailable):
        auth.authenticate("Bearer sk-never-seen")
    assert auth.authenticate(f"Bearer {KEY}") == "team-a"
    assert not auth.store_usable and auth.status()["key_store_age_s"] == 61
    auth.set_stored_keys({digest("sk-stored-1"): "stored"})
    assert auth.authenticate("Bearer sk-stored-1") == "stored"


@pytest.mark.parametrize(
    ("config", "open_"),
    [
        ({}, True),
        ({"auth": {"keys": [{"name": "a", "key": KEY}]}}, False),
        ({"persistence": {"enabled": True}}, False),  # keys may live in the database
        ({"auth": {"open": True}, "persistence": {"enabled": True}}, True),
        ({"auth": {"open": False}}, False),
    ],
)
def test_open_access_is_the_config_s_decision(config: dict[str, object], open_: bool) -> None:
    assert open_by_config(load_config(environ={}, **config)) is open_


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "gateway.internal"])
def test_an_open_api_is_refused_on_a_non_loopback_bind(host: str) -> None:
    problem = open_bind_problem(load_config(environ={}, server={"host": host}))
    assert problem is not None and "auth.keys" in problem and "gwctl keys create" in problem
    problem = open_bind_problem(load_config(environ={}, server={"host": host}, auth={"open": True}))
    assert problem is not None and "auth.open" in problem
    keyed = load_config(environ={}, server={"host": host}, auth={"keys": [{"name": "a", "key": KEY}]})
    assert open_bind_problem(keyed) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_an_open_api_is_fine_on_loopback(host: str) -> None:
    assert open_bind_problem(load_config(environ={}, server={"host": host}, auth={"open": True})) is None


def test_a_key_that_expires_after_it_passed_fails_at_once() -> None:
    """The expiry hook (the limits stage's check_expiry) is asked on every call, remembered keys too."""
    expired: set[str] = set()

    def expiry(name: str) -> None:
        if name in expired:
            raise AuthenticationFailed(f"{name} has expired")

    auth = authenticator(stored=True, expiry=expiry)
    auth.set_stored_keys({digest("sk-stored-1"): "stored"})
    assert auth.authenticate("Bearer sk-stored-1") == "stored"
    assert auth.authenticate(f"Bearer {KEY}") == "team-a"
    expired.update({"stored", "team-a"})
    for header in ("Bearer sk-stored-1", f"Bearer {KEY}"):  # both remembered as passed
        with pytest.raises(AuthenticationFailed, match="expired"):
            auth.authenticate(header)
    expired.add("team-b")
    with pytest.raises(AuthenticationFailed, match="expired"):
        auth.authenticate(f"Bearer {HASHED}")  # never passed: refused before it is remembered
    assert f"Bearer {HASHED}" not in auth._passed
