"""Limit and budget settings that `gateway.config` embeds (config teams, the limiter's own knobs).
What one key may do (`KeyLimits`) is part of a key's definition, in `gateway.pipeline.settings`.

Units: requests and tokens per `routing.rate_window_s` (60 s: per minute), US dollars, seconds.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from gateway.pipeline.settings import AuthConfig, KeyLimits
from gateway.routing.settings import RoutingConfig
from kernel.frozen import Frozen


class TeamConfig(KeyLimits):
    """A team defined in the config (database teams come from `gwctl teams`)."""


class LimitsConfig(Frozen):
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


class LimiterSettings(Protocol):
    """The slices of `gateway.config.Settings` the limiter reads: its own, the keys (auth.keys'
    limits and teams) and routing's (rate window, routing.keys' rpm/tpm)."""

    @property
    def limits(self) -> LimitsConfig: ...

    @property
    def auth(self) -> AuthConfig: ...

    @property
    def routing(self) -> RoutingConfig: ...
