"""Authenticate the bearer key: gateway keys for the API, a separate admin key for admin routes.

Keys are compared by their sha256 digest, so config may hold either the key or "sha256:<hex>".
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from gateway.config import AuthConfig, key_digest
from gateway.errors import AuthenticationFailed, PermissionDenied


# Distinct Authorization headers remembered as passed (a few hundred bytes each).
PASSED_CAP = 4096


class Authenticator:
    def __init__(self, config: AuthConfig) -> None:
        self._keys = {k.digest: k.name for k in config.keys}
        # Config keys and add_key()'s; keys from the database come and go with set_stored_keys().
        self._static = dict(self._keys)
        self._stored_defined = False
        self._admin = key_digest(config.admin_key.get_secret_value()) if config.admin_key else None
        # Authorization header -> key name, for headers that passed: a dict lookup instead of a
        # sha256 per request. Emptied whenever the keys change, and when it grows past the cap.
        self._passed: dict[str, str] = {}

    @property
    def open_access(self) -> bool:
        """No gateway key is configured (nor was one ever stored): the API accepts any caller."""
        return not self._keys and not self._stored_defined

    @property
    def admin_enabled(self) -> bool:
        return self._admin is not None

    def add_key(self, digest: str, name: str) -> None:
        self._static[digest] = name
        self._keys[digest] = name
        self._passed = {}

    def set_stored_keys(self, active: Mapping[str, str], *, any_defined: bool) -> None:
        """Replace the database's keys (digest -> name) in one swap; config keys win on a clash.
        Once any key was stored, revoking them all closes the API instead of opening it."""
        self._keys = {**active, **self._static}
        self._stored_defined = any_defined
        self._passed = {}  # a revoked key must fail from now on

    def authenticate(self, authorization: str | None) -> str | None:
        """The key's name, or None under open access. Raises AuthenticationFailed."""
        if not self._keys and not self._stored_defined:
            return None
        if authorization is not None and (known := self._passed.get(authorization)) is not None:
            return known
        token = _bearer(authorization)
        if token is None:
            raise AuthenticationFailed(
                "You didn't provide an API key. You need to provide your API key in an Authorization "
                "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
        name = self._keys.get(_digest(token))
        if name is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        if len(self._passed) >= PASSED_CAP:
            self._passed = {}
        self._passed[authorization] = name  # type: ignore[index]  # not None: a token was found
        return name

    def authenticate_admin(self, authorization: str | None) -> None:
        if self._admin is None:
            raise PermissionDenied("The admin API is disabled: set auth.admin_key (GW_AUTH__ADMIN_KEY).")
        token = _bearer(authorization)
        if token is None:
            raise AuthenticationFailed("The admin API needs the admin key as a Bearer token.")
        if hmac.compare_digest(_digest(token), self._admin):
            return
        if _digest(token) in self._keys:
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
