"""Authenticate the bearer key: gateway keys for the API, a separate admin key for admin routes.

Keys are compared by their sha256 digest, so config may hold either the key or "sha256:<hex>".

Open access is decided by the config alone (`auth.open`), never by a failed or empty read of the
database: with persistence on, a key that is not in the config is checked against the stored keys,
and while those were never loaded, or not refreshed for `auth.max_key_staleness_s`, it gets 503
``key_store_unavailable`` (config keys keep working).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.pipeline.settings import AuthConfig, AuthSettings, key_digest
from kernel.errors import AuthenticationFailed, KeyStoreUnavailable, PermissionDenied

# Distinct Authorization headers remembered as passed (a few hundred bytes each).
PASSED_CAP = 4096


def open_by_config(settings: AuthSettings) -> bool:
    """Whether the API takes callers without a key: `auth.open`, or when unset, no key can exist."""
    if settings.auth.open is not None:
        return settings.auth.open
    return not settings.auth.keys and not settings.persistence.enabled


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


HOW_TO_ADD_A_KEY = (
    "add a key under auth.keys (e.g. GW_AUTH__KEYS='[{\"name\":\"me\",\"key\":\"<16+ random characters>\"}]'),"
    " or turn persistence on and create one with `gwctl keys create NAME`"
)


def open_bind_problem(settings: AuthSettings) -> str | None:
    """One line when the API would be open on an address other machines can reach."""
    host = settings.server.host
    if not open_by_config(settings) or is_loopback(host):
        return None
    if settings.auth.open:
        return (
            f"auth.open is true and server.host {host} is not a loopback address: an open API is served on"
            f" loopback only. Set auth.open: false (GW_AUTH__OPEN=false) and {HOW_TO_ADD_A_KEY}"
        )
    return (
        f"no gateway key is configured and server.host {host} is not a loopback address, so the API would be open:"
        f" {HOW_TO_ADD_A_KEY}"
    )


class Authenticator:
    def __init__(
        self,
        config: AuthConfig,
        *,
        open_access: bool,
        stored: bool = False,
        clock: Callable[[], float] = time.monotonic,
        expiry: Callable[[str], None] | None = None,
    ) -> None:
        """`stored`: keys may also come from the database (`set_stored_keys`); `clock` is monotonic
        seconds; `expiry` raises for a key (or its team) past its expiry (the limits stage's
        `check_expiry`), on every route, cached keys included."""
        self._open = open_access
        self._expiry = expiry
        # Config keys and add_key()'s; keys from the database come and go with set_stored_keys().
        self._static = {k.digest: k.name for k in config.keys}
        self._stored: dict[str, str] = {}
        self._uses_store = stored
        self._stored_at: float | None = None  # when the stored keys were last loaded
        self._fresh_until = float("-inf")  # stored keys are trusted until then (clock seconds)
        self._max_staleness = config.max_key_staleness_s
        self._clock = clock
        self._admin = key_digest(config.admin_key.get_secret_value()) if config.admin_key else None
        # Authorization header -> (key name, from the database), for headers that passed: a dict
        # lookup instead of a sha256 per request. Emptied whenever the keys change, and past the cap.
        self._passed: dict[str, tuple[str, bool]] = {}

    @property
    def open_access(self) -> bool:
        """The config opened the API: it accepts any caller."""
        return self._open

    @property
    def admin_enabled(self) -> bool:
        return self._admin is not None

    def add_key(self, digest: str, name: str) -> None:
        self._static[digest] = name
        self._passed = {}

    def set_stored_keys(self, active: Mapping[str, str]) -> None:
        """Replace the database's keys (digest -> name) in one swap; config keys win on a clash."""
        self._stored = dict(active)
        self._stored_at = self._clock()
        self._fresh_until = self._stored_at + self._max_staleness
        self._passed = {}  # a revoked key must fail from now on

    def _store_problem(self) -> str | None:
        if self._stored_at is None:
            return "The gateway has not loaded its keys from the database yet; retry shortly."
        age = self._clock() - self._stored_at
        if age > self._max_staleness:
            return f"The gateway could not refresh its keys from the database for {age:.0f} s; retry shortly."
        return None

    def _unavailable(self) -> KeyStoreUnavailable:
        problem = self._store_problem() or "The gateway's keys from the database are stale; retry shortly."
        return KeyStoreUnavailable(problem, headers={"retry-after": "5"})

    def status(self) -> dict[str, Any]:
        """For /readyz: whether database keys can be checked now, and if not why."""
        if not self._uses_store:
            return {"open": self._open, "key_store": "unused"}
        problem = self._store_problem()
        body: dict[str, Any] = {"open": self._open, "key_store": "ok" if problem is None else "unavailable"}
        if self._stored_at is not None:
            body["key_store_age_s"] = round(self._clock() - self._stored_at, 1)
        body["max_key_staleness_s"] = self._max_staleness
        if problem is not None:
            body["reason"] = problem
        return body

    @property
    def store_usable(self) -> bool:
        return not self._uses_store or self._store_problem() is None

    def authenticate(self, authorization: str | None) -> str | None:
        """The key's name, or None under open access. Raises AuthenticationFailed, or
        KeyStoreUnavailable for a key that only the database could vouch for right now."""
        if self._open:
            return None
        if authorization is not None and (known := self._passed.get(authorization)) is not None:
            known_name, known_stored = known
            if known_stored and self._clock() > self._fresh_until:
                raise self._unavailable()
            if self._expiry is not None:
                self._expiry(known_name)
            return known_name
        token = _bearer(authorization)
        if token is None:
            raise AuthenticationFailed(
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        digest = _digest(token)
        name = self._static.get(digest)
        stored = False
        if name is None and self._uses_store:
            if self._clock() > self._fresh_until:
                raise self._unavailable()
            name, stored = self._stored.get(digest), True
        if name is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        if self._expiry is not None:
            self._expiry(name)
        if len(self._passed) >= PASSED_CAP:
            self._passed = {}
        self._passed[authorization] = (name, stored)  # type: ignore[index]  # not None: a token was found
        return name

    def authenticate_admin(self, authorization: str | None) -> None:
        if self._admin is None:
            raise PermissionDenied("The admin API is disabled: set auth.admin_key (GW_AUTH__ADMIN_KEY).")
        token = _bearer(authorization)
        if token is None:
            raise AuthenticationFailed("The admin API needs the admin key as a Bearer token.")
        digest = _digest(token)
        if hmac.compare_digest(digest, self._admin):
            return
        if digest in self._static or digest in self._stored:
            raise PermissionDenied("This key is not the admin key.")
        raise AuthenticationFailed("Incorrect API key provided.")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
