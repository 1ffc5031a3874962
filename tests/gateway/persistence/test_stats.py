"""The admin API's queries: figures over a window, exact percentiles, time series, spend."""

from __future__ import annotations

from datetime import date

import pytest
from sqlalchemy import Engine

from gateway.persistence import keys, stats, teams
from gateway.persistence.requests import write_batch
from tests.gateway.persistence.factories import record

T0 = 1_770_000_000.0  # 2026-02-02T02:40:00Z


def test_parse_duration() -> None:
    assert [stats.parse_duration(s) for s in ("90s", "5m", "1h", "7d")] == [90, 300, 3600, 7 * 86400]
    for bad in ("", "1", "h", "1w", "0s", "-1h", "400d"):
        with pytest.raises(ValueError):
            stats.parse_duration(bad)


def test_endpoint_figures_over_a_window(engine: Engine) -> None:
    batch = [
        (
            T0 + i,
            record(
                f"a{i}",
                latency=(i + 1) / 1000,
                ttft=(i + 1) / 2000,
                overhead_ms=0.1 * (i + 1),
                prompt=100,
                cached=25,
                completion=10,
                cost=0.01,
            ),
        )
        for i in range(100)
    ]
    batch += [
        (
            T0 + 5,
            record(
                "err", status=502, error="ProviderServerError", latency=9.0, prompt=0, cached=0, completion=0, cost=0.0
            ),
        )
    ]
    batch += [(T0 - 7200, record("old", latency=99.0))]  # outside the window
    batch += [(T0 + 1, record("b1", endpoint="q/m", latency=0.2))]
    batch += [(T0 + 2, record("b2", endpoint="q/m", latency=0.2, api="responses"))]
    batch += [(T0 + 3, record("b3", endpoint="q/m", latency=0.2, api="messages"))]
    batch += [(T0 + 4, record("b4", endpoint="q/m", latency=0.2, api=None))]  # a row from before 0007
    batch += [(T0 + 1, record("none", endpoint=None, status=404, error="ModelNotFound"))]
    write_batch(engine, batch)

    figures = stats.endpoint_stats(engine, since=T0 - 60)
    assert set(figures) == {"p/m", "q/m"}
    a = figures["p/m"]
    assert (a["requests"], a["errors"]) == (101, 1)
    assert a["error_rate"] == pytest.approx(1 / 101, abs=1e-4)
    assert (a["prompt_tokens"], a["cached_tokens"], a["completion_tokens"]) == (10_000, 2_500, 1_000)
    assert a["cache_hit_rate"] == 0.25
    assert a["cost_usd"] == pytest.approx(1.0)
    # Successful requests only; nearest rank over latencies 1..100 ms.
    assert a["latency_ms"] == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert a["ttft_ms"] == {"p50": 25.0, "p95": 47.5}
    assert figures["q/m"]["latency_ms"] == {"p50": 200.0, "p95": 200.0, "p99": 200.0}
    assert figures["q/m"]["ttft_ms"] is None
    assert a["requests_by_api"] == {"chat": 101}
    assert figures["q/m"]["requests_by_api"] == {"chat": 2, "responses": 1, "messages": 1}


def test_timeseries_buckets(engine: Engine) -> None:
    start = 1_770_000_000.0 - (1_770_000_000 % 300)  # a 5-minute boundary
    write_batch(
        engine,
        [
            (start + 1, record("1", latency=0.1)),
            (start + 299, record("2", latency=0.3, ttft=0.05)),
            (start + 300, record("3", latency=0.2, status=500, error="X")),
            (start + 900, record("4", latency=0.4, endpoint="other")),
        ],
    )
    series = stats.timeseries(engine, "p/m", since=start - 1, bucket=300)
    assert [p["start"] for p in series] == [int(start), int(start) + 300]
    first, second = series
    assert (first["requests"], first["errors"]) == (2, 0)
    assert first["latency_ms_avg"] == pytest.approx(200.0) and first["latency_ms_max"] == pytest.approx(300.0)
    assert first["ttft_ms_avg"] == pytest.approx(50.0)
    assert (second["requests"], second["errors"], second["latency_ms_avg"]) == (1, 1, None)


def test_spend_per_key(engine: Engine) -> None:
    day1 = 1_767_268_800.0  # 2026-01-01T12:00Z
    write_batch(
        engine,
        [
            (day1, record("1", key="a", cost=1.0)),
            (day1 + 86400, record("2", key="a", cost=2.0)),
            (day1, record("3", key="b", cost=5.0)),
            (day1, record("4", key=None, cost=0.5)),
        ],
    )
    rows = stats.spend(engine, date(2026, 1, 1))
    assert [(r["key"], r["requests"], r["cost_usd"]) for r in rows] == [("b", 1, 5.0), ("a", 2, 3.0), (None, 1, 0.5)]
    assert [d["day"] for d in rows[1]["days"]] == ["2026-01-01", "2026-01-02"]
    assert [r["key"] for r in stats.spend(engine, date(2026, 1, 2))] == ["a"]
    assert [r["key"] for r in stats.spend(engine, date(2026, 1, 1), key_name="b")] == ["b"]


def test_spend_per_team_sums_its_keys_per_day(engine: Engine) -> None:
    """A team's spend is its keys' (revoked ones too, by the team they are in now), config keys'
    teams included; a key without a team is in none."""
    teams.create_team(engine, "eng")
    teams.create_team(engine, "ops")
    keys.create_key(engine, "a", team="eng")
    keys.create_key(engine, "b", team="eng")
    keys.create_key(engine, "c", team="ops")
    keys.create_key(engine, "solo")
    keys.revoke_key(engine, "b")
    day1 = 1_767_268_800.0  # 2026-01-01T12:00Z
    write_batch(
        engine,
        [
            (day1, record("1", key="a", cost=1.0)),
            (day1 + 86400, record("2", key="a", cost=2.0)),
            (day1 + 86400, record("3", key="b", cost=0.25)),
            (day1, record("4", key="c", cost=0.5)),
            (day1, record("5", key="solo", cost=9.0)),
            (day1 + 86400, record("6", key="cfg", cost=0.125)),
        ],
    )
    rows = stats.spend_by_team(engine, date(2026, 1, 1), {"cfg": "ops"})
    assert [(r["team"], r["keys"], r["requests"], r["cost_usd"]) for r in rows] == [
        ("eng", ["a", "b"], 3, 3.25),
        ("ops", ["c", "cfg"], 2, 0.625),
    ]
    days = [(d["day"], d["requests"], d["cost_usd"]) for d in rows[0]["days"]]
    assert days == [("2026-01-01", 1, 1.0), ("2026-01-02", 2, 2.25)]
    # From day 2: c spent only before; cfg belongs to no team without the config's mapping.
    assert [r["team"] for r in stats.spend_by_team(engine, date(2026, 1, 2))] == ["eng"]
