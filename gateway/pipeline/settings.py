"""The pipeline's configuration slice: gateway keys (with their limits and budgets, which the limits
stage enforces) and how callers authenticate (`Settings.auth`)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import Field, SecretStr, field_validator

from kernel.frozen import Frozen

Period = Literal["daily", "weekly", "monthly", "total"]


class KeyLimits(Frozen):
    """What a key or a team may do (`gateway.limits`). Every field unset: no limit.

    Units: requests and tokens per `routing.rate_window_s` (60 s: per minute), US dollars."""

    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # Requests in flight at once.
    max_parallel: int | None = Field(None, ge=1)
    # US dollars per `budget_period` (calendar periods in UTC; `total` never resets).
    budget_usd: float | None = Field(None, ge=0)
    budget_period: Period = "monthly"
    # fnmatch patterns of public model names ("gpt-4o*", "org/*"); None allows every model.
    allowed_models: tuple[str, ...] | None = None
    # Endpoint regions its requests may go to: names or fnmatch patterns ("eu-*"); None allows any.
    # A team's narrow its keys' (both must allow a region), as do routing.keys' `regions`.
    allowed_regions: tuple[str, ...] | None = None
    # "deny": never route to a provider that may keep or train on prompts (the key's or its team's).
    data_collection: Literal["allow", "deny"] = "allow"
    # After this instant the key (or every key of the team) gets 401.
    expires_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class GatewayKey(KeyLimits):
    """A config key, with the same limits a database key can have."""

    name: str = Field(min_length=1)
    # A team of `limits.teams`: its limits and budget bind this key too.
    team: str | None = None
    # The key itself, or its stored hash as "sha256:<hex>".
    key: SecretStr

    @field_validator("key")
    @classmethod
    def _hash_form(cls, v: SecretStr) -> SecretStr:
        raw = v.get_secret_value()
        if raw.startswith("sha256:"):
            digest = raw[len("sha256:") :]
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError("a sha256: key must be followed by 64 hex digits")
        elif len(raw) < 8:
            raise ValueError("must be at least 8 characters")
        return v

    @property
    def digest(self) -> str:
        return key_digest(self.key.get_secret_value())


class AuthConfig(Frozen):
    keys: tuple[GatewayKey, ...] = ()
    admin_key: SecretStr | None = None
    # Accept callers without a key. True is refused on a non-loopback bind; unset means open only
    # when no key can exist (no auth.keys and persistence off), never because a read failed.
    open: bool | None = None
    # Past this long without a successful key refresh, database keys are refused (503
    # key_store_unavailable) so a revocation cannot stay unseen; config keys keep working.
    max_key_staleness_s: float = Field(60.0, gt=0)
    # Dashboard sessions end after this long without a request (and after 12 h in any case).
    session_idle_timeout_s: float = Field(1800.0, gt=0)
    # Failed admin sign-ins and admin bearer checks allowed per client address per minute.
    admin_failures_per_minute: int = Field(10, ge=1)

    @field_validator("admin_key")
    @classmethod
    def _long_admin_key(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters")
        return v


def key_digest(raw: str) -> str:
    """The stored form of a gateway key: its sha256 hex digest (a 'sha256:' value is already one)."""
    if raw.startswith("sha256:"):
        return raw[len("sha256:") :].lower()
    return hashlib.sha256(raw.encode()).hexdigest()


class _Enabled(Protocol):
    @property
    def enabled(self) -> bool: ...


class _Bind(Protocol):
    @property
    def host(self) -> str: ...


class AuthSettings(Protocol):
    """The slices of `gateway.config.Settings` that decide whether the API is open: the keys, whether
    the database may hold more (persistence), and the address served."""

    @property
    def auth(self) -> AuthConfig: ...

    @property
    def persistence(self) -> _Enabled: ...

    @property
    def server(self) -> _Bind: ...
