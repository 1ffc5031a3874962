"""The limiter's view of keys and teams: plain values built from the config and the database
(refreshed off the request path), budget periods, and model patterns."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal

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
    allowed_regions: tuple[str, ...] | None = None  # names or fnmatch patterns, lower case
    data_collection: Literal["allow", "deny"] = "allow"
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
    def steers(self) -> bool:
        """Whether it narrows where routing may send the request."""
        return self.allowed_regions is not None or self.data_collection == "deny"


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
        allowed_regions=regions_of(limits.allowed_regions),
        data_collection=limits.data_collection,
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


def regions_of(raw: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(r.strip().lower() for r in raw if r.strip()) if raw is not None else None


def allowed_regions(patterns: Sequence[tuple[str, ...] | None], known: Iterable[str]) -> tuple[str, ...] | None:
    """The regions of `known` that every pattern list allows (None: no list limits them), so a
    team's list narrows its key's. A list that matches nothing known allows nothing."""
    lists = [p for p in patterns if p is not None]
    if not lists:
        return None
    return tuple(sorted(r for r in {k.lower() for k in known} if all(_matches(p, r) for p in lists)))
