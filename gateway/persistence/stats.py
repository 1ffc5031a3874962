"""The admin API's read queries over the request log and the spend table: per-endpoint figures over
a window (error rate, latency percentiles, cache hit rate, cost), time series, spend per key and per team.

Percentiles are exact nearest-rank values from window functions, which SQLite and PostgreSQL
both have, so the same SQL serves both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from typing import Any

from sqlalchemy import Connection, Engine, case, func, or_, select
from sqlalchemy.sql import ColumnElement

from gateway.persistence.models import gateway_keys, request_log, spend_daily, teams
from gateway.persistence.types import epoch_bucket, utc

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d+)([smhd])$")
MAX_WINDOW = 366 * 86400


def parse_duration(text: str) -> int:
    """'90s', '5m', '1h', '7d' -> seconds. Raises ValueError."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number and s, m, h or d, e.g. 1h")
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < seconds <= MAX_WINDOW:
        raise ValueError(f"duration {text!r} must be between 1s and 366d")
    return seconds


def _percentiles(
    conn: Connection, value: ColumnElement[Any], where: list[ColumnElement[bool]], qs: tuple[int, ...]
) -> dict[str, dict[str, float]]:
    t = request_log.c
    inner = (
        select(
            t.endpoint_id.label("endpoint_id"),
            value.label("v"),
            func.row_number().over(partition_by=t.endpoint_id, order_by=value).label("rn"),
            func.count().over(partition_by=t.endpoint_id).label("n"),
        )
        .where(*where)
        .subquery()
    )
    ranks = {q: (inner.c.n * q + 99) // 100 for q in qs}  # nearest rank: ceil(n * q / 100)
    stmt = select(inner.c.endpoint_id, inner.c.rn, inner.c.n, inner.c.v).where(
        or_(*(inner.c.rn == r for r in ranks.values()))
    )
    out: dict[str, dict[str, float]] = {}
    for endpoint_id, rn, n, v in conn.execute(stmt):
        for q in qs:
            if rn == (n * q + 99) // 100:
                out.setdefault(endpoint_id, {})[f"p{q}"] = round(float(v), 3)
    return out


def endpoint_stats(engine: Engine, since: float) -> dict[str, dict[str, Any]]:
    """endpoint id -> figures for requests at or after `since` (epoch seconds)."""
    t = request_log.c
    base = [t.at >= utc(since), t.endpoint_id.is_not(None)]
    totals = (
        select(
            t.endpoint_id,
            func.count().label("requests"),
            func.sum(case((t.status >= 400, 1), else_=0)).label("errors"),
            func.sum(t.prompt_tokens).label("prompt_tokens"),
            func.sum(t.cached_tokens).label("cached_tokens"),
            func.sum(t.completion_tokens).label("completion_tokens"),
            func.sum(t.cost_usd).label("cost_usd"),
        )
        .where(*base)
        .group_by(t.endpoint_id)
    )
    with engine.connect() as conn:
        rows = conn.execute(totals).mappings().all()
        latency = _percentiles(conn, t.latency_ms, [*base, t.status < 400], (50, 95, 99))
        ttft = _percentiles(conn, t.ttft_ms, [*base, t.status < 400, t.ttft_ms.is_not(None)], (50, 95))
        overhead = _percentiles(conn, t.overhead_ms, base, (50, 99))
        by_api = _requests_by_api(conn, base)
    out = {}
    for r in rows:
        requests, prompt = int(r["requests"]), int(r["prompt_tokens"] or 0)
        out[r["endpoint_id"]] = {
            "requests": requests,
            "errors": int(r["errors"] or 0),
            "error_rate": round(int(r["errors"] or 0) / requests, 4) if requests else 0.0,
            "prompt_tokens": prompt,
            "cached_tokens": int(r["cached_tokens"] or 0),
            "completion_tokens": int(r["completion_tokens"] or 0),
            "cache_hit_rate": round(int(r["cached_tokens"] or 0) / prompt, 4) if prompt else None,
            "cost_usd": float(r["cost_usd"] or 0.0),
            "latency_ms": latency.get(r["endpoint_id"]),
            "ttft_ms": ttft.get(r["endpoint_id"]),
            "overhead_ms": overhead.get(r["endpoint_id"]),
            "requests_by_api": by_api.get(r["endpoint_id"], {}),
        }
    return out


def _requests_by_api(conn: Connection, where: list[ColumnElement[bool]]) -> dict[str, dict[str, int]]:
    """endpoint id -> {client API: requests}. A row from before the `api` column counts under its op."""
    t = request_log.c
    api = func.coalesce(t.api, t.op).label("api")
    stmt = select(t.endpoint_id, api, func.count()).where(*where).group_by(t.endpoint_id, api)
    out: dict[str, dict[str, int]] = {}
    for endpoint_id, name, n in conn.execute(stmt):
        out.setdefault(endpoint_id, {})[name] = int(n)
    return out


def timeseries(engine: Engine, endpoint_id: str, since: float, bucket: int) -> list[dict[str, Any]]:
    t = request_log.c
    start = epoch_bucket(t.at, bucket).label("start")
    ok = t.status < 400
    stmt = (
        select(
            start,
            func.count().label("requests"),
            func.sum(case((t.status >= 400, 1), else_=0)).label("errors"),
            func.avg(case((ok, t.latency_ms))).label("latency_ms_avg"),
            func.max(case((ok, t.latency_ms))).label("latency_ms_max"),
            func.avg(case((ok, t.ttft_ms))).label("ttft_ms_avg"),
            func.sum(t.prompt_tokens).label("prompt_tokens"),
            func.sum(t.cached_tokens).label("cached_tokens"),
            func.sum(t.completion_tokens).label("completion_tokens"),
            func.sum(t.cost_usd).label("cost_usd"),
        )
        .where(t.at >= utc(since), t.endpoint_id == endpoint_id)
        .group_by(start)
        .order_by(start)
    )
    with engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    series = []
    for r in rows:
        prompt = int(r["prompt_tokens"] or 0)
        series.append(
            {
                "start": int(r["start"]),
                "requests": int(r["requests"]),
                "errors": int(r["errors"] or 0),
                "latency_ms_avg": _round(r["latency_ms_avg"]),
                "latency_ms_max": _round(r["latency_ms_max"]),
                "ttft_ms_avg": _round(r["ttft_ms_avg"]),
                "prompt_tokens": prompt,
                "cached_tokens": int(r["cached_tokens"] or 0),
                "completion_tokens": int(r["completion_tokens"] or 0),
                "cache_hit_rate": round(int(r["cached_tokens"] or 0) / prompt, 4) if prompt else None,
                "cost_usd": float(r["cost_usd"] or 0.0),
            }
        )
    return series


def _round(v: Any) -> float | None:
    return None if v is None else round(float(v), 3)


def spend(engine: Engine, since: date, *, key_name: str | None = None) -> list[dict[str, Any]]:
    """Spend per key from `since` (a UTC day) on: totals and the per-day rows, biggest spender first."""
    s = spend_daily.c
    q = select(spend_daily).where(s.day >= since).order_by(s.key_name, s.day)
    if key_name is not None:
        q = q.where(s.key_name == key_name)
    with engine.connect() as conn:
        rows = conn.execute(q).mappings().all()
    keys: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = keys.setdefault(
            r["key_name"],
            {
                "key": r["key_name"] or None,
                "requests": 0,
                "prompt_tokens": 0,
                "cached_tokens": 0,
                "completion_tokens": 0,
                "cost_usd": 0.0,
                "days": [],
            },
        )
        day = {
            "day": r["day"].isoformat(),
            "requests": int(r["requests"]),
            "prompt_tokens": int(r["prompt_tokens"]),
            "cached_tokens": int(r["cached_tokens"]),
            "completion_tokens": int(r["completion_tokens"]),
            "cost_usd": float(r["cost_usd"]),
        }
        entry["days"].append(day)
        for name in ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd"):
            entry[name] += day[name]
    return sorted(keys.values(), key=lambda e: -e["cost_usd"])


SUMS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd")


def spend_by_team(engine: Engine, since: date, config_teams: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Spend per team from `since` on: the sum of its keys' (revoked ones too, as budgets count
    them), by the team each key belongs to now; `config_teams`: config keys' teams (auth.keys)."""
    with engine.connect() as conn:
        members = conn.execute(
            select(gateway_keys.c.name, teams.c.name).join(teams, gateway_keys.c.team_id == teams.c.id)
        ).all()
    team_of = {**(config_teams or {}), **{key: team for key, team in members}}
    out: dict[str, dict[str, Any]] = {}
    for k in spend(engine, since):
        team = team_of.get(k["key"] or "")
        if team is None:
            continue
        entry = out.setdefault(team, {"team": team, "keys": [], **dict.fromkeys(SUMS, 0), "days": {}})
        entry["keys"].append(k["key"])
        for name in SUMS:
            entry[name] += k[name]
        for d in k["days"]:
            day = entry["days"].setdefault(d["day"], {"day": d["day"], **dict.fromkeys(SUMS, 0)})
            for name in SUMS:
                day[name] += d[name]
    for entry in out.values():
        entry["keys"].sort()
        entry["cost_usd"] = round(entry["cost_usd"], 9)
        entry["days"] = [{**d, "cost_usd": round(d["cost_usd"], 9)} for _, d in sorted(entry["days"].items())]
    return sorted(out.values(), key=lambda e: (-e["cost_usd"], e["team"]))
