"""The limiter's view of keys and teams: plain values built from the config and the database
(refreshed off the request path), budget periods, and model patterns."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from gateway.pipeline.settings import KeyLimits, Period

MICRO = 1_000_000  # budgets and spend are counted in micro-dollars: integer arithmetic, exact to the cent


def to_micro(usd: float) -> int:
    return round(usd * MICRO)


@dataclass(frozen=True, slots=True)
class Scope:
    """A key's or a team's limits. `spent_usd`: what the database recorded for the current period
    at the last refresh, which seeds the shared counter should it be lost (a Redis restart)."""

    kind: str  # "key" | "team"
    name: str
    rpm: int | None = None
    tpm: int | None = None
    max_parallel: int | None = None
    budget_usd: float | None = None
    budget_period: Period = "monthly"
    allowed_models: tuple[str, ...] | None = None
    expires_at: float | None = None  # epoch seconds
    spent_usd: float = 0.0
    spent_period: str = ""  # the period `spent_usd` is for

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def limited(self) -> bool:
        return self.rpm is not None or self.tpm is not None or self.max_parallel is not None or self.budget_usd is not None

    @property
    def checks(self) -> bool:
        return self.limited or self.allowed_models is not None or self.expires_at is not None


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key: Scope
    team: Scope | None = None
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def scopes(self) -> tuple[Scope, ...]:
        return (self.key,) if self.team is None else (self.key, self.team)


def scope_from(kind: str, name: str, limits: KeyLimits, **extra: object) -> Scope:
    return Scope(
        kind,
        name,
        rpm=limits.rpm,
        tpm=limits.tpm,
        max_parallel=limits.max_parallel,
        budget_usd=limits.budget_usd,
        budget_period=limits.budget_period,
        allowed_models=limits.allowed_models,
        expires_at=limits.expires_at.timestamp() if limits.expires_at is not None else None,
        **extra,  # type: ignore[arg-type]
    )


def period_bounds(period: Period, now: float) -> tuple[str, float, float | None]:
    """(period id, start, reset time) of the UTC calendar period holding `now` (epoch seconds);
    `total` has no reset."""
    if period == "total":
        return "total", 0.0, None
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "daily":
        start, end, label = day, day + timedelta(days=1), f"d{day:%Y%m%d}"
    elif period == "weekly":
        start = day - timedelta(days=day.weekday())
        end, label = start + timedelta(days=7), f"w{start:%Y%m%d}"
    else:
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
        label = f"m{start:%Y%m}"
    return label, start.timestamp(), end.timestamp()


@lru_cache(maxsize=4096)
def _matches(patterns: tuple[str, ...], model: str) -> bool:
    return any(fnmatch.fnmatchcase(model, p) for p in patterns)


def model_allowed(patterns: tuple[str, ...] | None, model: str) -> bool:
    return patterns is None or _matches(patterns, model)
