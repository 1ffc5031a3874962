"""Limit and budget settings: frozen values that `gateway.config` embeds (config keys, teams, the
limiter's own knobs). Imports nothing from the gateway, so `gateway.config` can import it.

Units: requests and tokens per `routing.rate_window_s` (60 s: per minute), US dollars, seconds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Period = Literal["daily", "weekly", "monthly", "total"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KeyLimits(_Frozen):
    """What a key or a team may do. Every field unset: no limit."""

    rpm: int | None = Field(None, ge=1)
    tpm: int | None = Field(None, ge=1)
    # Requests in flight at once.
    max_parallel: int | None = Field(None, ge=1)
    # US dollars per `budget_period` (calendar periods in UTC; `total` never resets).
    budget_usd: float | None = Field(None, ge=0)
    budget_period: Period = "monthly"
    # fnmatch patterns of public model names ("gpt-4o*", "org/*"); None allows every model.
    allowed_models: tuple[str, ...] | None = None
    # After this instant the key (or every key of the team) gets 401.
    expires_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class TeamConfig(KeyLimits):
    """A team defined in the config (database teams come from `gwctl teams`)."""


class LimitsConfig(_Frozen):
    # What a key with limits gets while the shared store (Redis) does not answer: "local" counts on
    # this replica alone (limits hold per replica, so N replicas may admit up to N times the
    # limit), "closed" refuses it with 503 limits_unavailable.
    on_store_failure: Literal["local", "closed"] = "local"
    # After a store failure, the store is tried again this long later (requests meanwhile follow
    # `on_store_failure` without waiting on it).
    retry_store_after_s: float = Field(1.0, gt=0)
    # A request's parallel slot is freed by its settlement, or after this long if its replica died.
    parallel_lease_s: float = Field(900.0, gt=0)
    # Teams defined in the config: name -> limits; config keys join one with `team`.
    teams: dict[str, TeamConfig] = Field(default_factory=dict)
