"""The database's keys and teams as the limiter sees them (`gateway.limits.policy.KeyRecord`),
with the spend the request writer recorded for each one's current budget period: loaded by the
periodic refresh (never on the request path), and shown by `gwctl keys`/`teams` and the admin API.

Spend comes from `spend_daily` (one row per key and UTC day); a team's is the sum of its keys'
(revoked ones included). It seeds the limiter's shared counter should that be lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Engine, func, select

from gateway.limits.policy import KeyRecord, Scope, period_bounds, regions_of
from gateway.persistence.keys import KeySet, StoredKey, load_keys
from gateway.persistence.models import spend_daily
from gateway.persistence.teams import StoredTeam, list_teams
from gateway.pipeline.settings import Period

PERIODS: tuple[Period, ...] = ("daily", "weekly", "monthly", "total")


@dataclass(frozen=True, slots=True)
class SpendBook:
    """Recorded spend per key name: by UTC day since the earliest period start, and in total."""

    by_day: dict[str, dict[date, float]]
    total: dict[str, float]
    now: float

    def of(self, names: Iterable[str], period: Period) -> tuple[str, float]:
        """(period id, USD) of these keys together in the current `period`."""
        label, start, _ = period_bounds(period, self.now)
        if period == "total":
            return label, sum(self.total.get(n, 0.0) for n in names)
        first = datetime.fromtimestamp(start, UTC).date()
        return label, sum(v for n in names for d, v in self.by_day.get(n, {}).items() if d >= first)


def load_spend(engine: Engine, now: float) -> SpendBook:
    earliest = min(period_bounds(p, now)[1] for p in ("weekly", "monthly"))
    first = datetime.fromtimestamp(earliest, UTC).date()
    by_day: dict[str, dict[date, float]] = defaultdict(dict)
    with engine.connect() as conn:
        recent = conn.execute(
            select(spend_daily.c.key_name, spend_daily.c.day, spend_daily.c.cost_usd).where(spend_daily.c.day >= first)
        ).all()
        total = conn.execute(select(spend_daily.c.key_name, func.sum(spend_daily.c.cost_usd)).group_by(spend_daily.c.key_name)).all()
    for name, day, cost in recent:
        by_day[name][day] = float(cost)
    return SpendBook(dict(by_day), {n: float(c or 0.0) for n, c in total}, now)


def _expiry(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


def key_scope(k: StoredKey, book: SpendBook) -> Scope:
    period: Period = (k.budget_period or "monthly")  # type: ignore[assignment]
    label, spent = book.of([k.name], period)
    return Scope(
        "key",
        k.name,
        rpm=k.rpm_limit,
        tpm=k.tpm_limit,
        max_parallel=k.max_parallel,
        budget_usd=k.budget_usd,
        budget_period=period,
        allowed_models=tuple(k.allowed_models) if k.allowed_models is not None else None,
        allowed_regions=regions_of(k.allowed_regions),
        data_collection="deny" if k.data_collection == "deny" else "allow",
        expires_at=_expiry(k.expires_at),
        spent_usd=spent,
        spent_period=label,
    )


def team_scope(t: StoredTeam, members: Iterable[str], book: SpendBook) -> Scope:
    period: Period = (t.budget_period or "monthly")  # type: ignore[assignment]
    label, spent = book.of(members, period)
    return Scope(
        "team",
        t.name,
        rpm=t.rpm_limit,
        tpm=t.tpm_limit,
        max_parallel=t.max_parallel,
        budget_usd=t.budget_usd,
        budget_period=period,
        allowed_models=tuple(t.allowed_models) if t.allowed_models is not None else None,
        allowed_regions=regions_of(t.allowed_regions),
        data_collection="deny" if t.data_collection == "deny" else "allow",
        expires_at=_expiry(t.expires_at),
        spent_usd=spent,
        spent_period=label,
    )


@dataclass(frozen=True, slots=True)
class Loaded:
    keys: KeySet
    records: dict[str, KeyRecord]  # active database keys by name
    teams: dict[str, Scope]
    book: SpendBook


def load_records(engine: Engine, now: float) -> Loaded:
    keyset = load_keys(engine)
    stored = keyset.keys or {}
    book = load_spend(engine, now)
    members: dict[str, list[str]] = defaultdict(list)
    for k in stored.values():
        if k.team:
            members[k.team].append(k.name)
    team_scopes = {t.name: team_scope(t, members.get(t.name, []), book) for t in list_teams(engine)}
    records = {
        k.name: KeyRecord(key_scope(k, book), team_scopes.get(k.team) if k.team else None, dict(k.metadata or {}))
        for k in stored.values()
        if k.active
    }
    return Loaded(keyset, records, team_scopes, book)


def config_seeds(book: SpendBook, records: Mapping[str, KeyRecord]) -> dict[str, tuple[str, float]]:
    """Recorded spend of config keys and config teams (scope id -> (period id, USD))."""
    seeds: dict[str, tuple[str, float]] = {}
    members: dict[str, list[str]] = defaultdict(list)
    teams: dict[str, Scope] = {}
    for name, r in records.items():
        seeds[r.key.id] = book.of([name], r.key.budget_period)
        if r.team is not None:
            members[r.team.id].append(name)
            teams[r.team.id] = r.team
    for team_id, names in members.items():
        seeds[team_id] = book.of(names, teams[team_id].budget_period)
    return seeds


def describe(scope: Scope, now: float, live_micro: int | None = None) -> dict[str, Any]:
    """A key's or team's limits, spend and what is left, for the CLI and the admin API. Spend is
    the live counter when one is given (it includes requests in flight at their worst case), else
    the database's record."""
    label, _, reset = period_bounds(scope.budget_period, now)
    spent = live_micro / 1e6 if live_micro is not None else (scope.spent_usd if scope.spent_period == label else 0.0)
    return {
        "rpm": scope.rpm,
        "tpm": scope.tpm,
        "max_parallel": scope.max_parallel,
        "budget_usd": scope.budget_usd,
        "budget_period": scope.budget_period,
        "allowed_models": list(scope.allowed_models) if scope.allowed_models is not None else None,
        "allowed_regions": list(scope.allowed_regions) if scope.allowed_regions is not None else None,
        "data_collection": scope.data_collection,
        "expires_at": datetime.fromtimestamp(scope.expires_at, UTC).isoformat() if scope.expires_at is not None else None,
        "spend_usd": round(spent, 6),
        "remaining_usd": round(max(0.0, scope.budget_usd - spent), 6) if scope.budget_usd is not None else None,
        "budget_resets_at": datetime.fromtimestamp(reset, UTC).isoformat() if reset is not None else None,
        "spend_source": "live" if live_micro is not None else "recorded",
    }

