"""Keys and teams as `gwctl keys|teams` and the admin API show them: their limits, the spend of
the current budget period and what is left of the budget (from the database's record, or from
the limiter's live counter when one is given)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from gateway.persistence.key_limits import describe, key_scope, load_spend, team_scope
from gateway.persistence.keys import StoredKey, list_keys
from gateway.persistence.teams import list_teams

# (scope id, period id) -> live spend in micro-dollars, or None where no counter exists.
LiveSpend = Callable[[str, str], int | None]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _status(k: StoredKey, now: float) -> str:
    if not k.active:
        return "revoked"
    if k.expires_at is not None and k.expires_at.timestamp() <= now:
        return "expired"
    return "active"


def views(engine: Engine, now: float, live: LiveSpend | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(keys, teams), each a JSON-ready dict."""
    stored = list_keys(engine)
    book = load_spend(engine, now)
    members: dict[str, list[str]] = defaultdict(list)
    for k in stored:
        if k.team:
            members[k.team].append(k.name)
    team_rows = []
    team_limits: dict[str, dict[str, Any]] = {}
    for t in list_teams(engine):
        scope = team_scope(t, members.get(t.name, []), book)
        figures = describe(scope, now, live(scope.id, scope.spent_period) if live else None)
        team_limits[t.name] = figures
        team_rows.append(
            {"name": t.name, "keys": sorted(members.get(t.name, [])), "created_at": _iso(t.created_at), "metadata": t.metadata or {}, **figures}
        )
    key_rows = []
    for k in stored:
        scope = key_scope(k, book)
        figures = describe(scope, now, live(scope.id, scope.spent_period) if live else None)
        row: dict[str, Any] = {
            "name": k.name,
            "prefix": k.prefix,
            "owner": k.owner,
            "team": k.team,
            "status": _status(k, now),
            "created_at": _iso(k.created_at),
            "revoked_at": _iso(k.revoked_at),
            "rotated_at": _iso(k.rotated_at),
            "metadata": k.metadata or {},
            "rpm_limit": k.rpm_limit,
            "tpm_limit": k.tpm_limit,
            **{name: value for name, value in figures.items() if name not in ("rpm", "tpm")},
        }
        if k.team and k.team in team_limits:
            team = team_limits[k.team]
            row["team_budget"] = {n: team[n] for n in ("budget_usd", "budget_period", "spend_usd", "remaining_usd", "budget_resets_at")}
        key_rows.append(row)
    return key_rows, team_rows
