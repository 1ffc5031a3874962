"""Request log inserts and the spend-per-key-and-day upsert, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from sqlalchemy import Engine, func, select

from gateway.persistence import requests as requests_repo
from gateway.persistence.models import request_log, spend_daily
from gateway.persistence.records import COLUMNS
from gateway.persistence.requests import spend_rows, write_batch
from tests.gateway.persistence.factories import record

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
DAY = 86400.0


def spend(engine: Engine) -> dict[tuple[str, date], tuple[int, int, int, int, float]]:
    s = spend_daily.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(s.key_name, s.day, s.requests, s.prompt_tokens, s.cached_tokens, s.completion_tokens, s.cost_usd)
        ).all()
    return {(r[0], r[1]): (r[2], r[3], r[4], r[5], r[6]) for r in rows}


def test_rows_keep_the_metadata(engine: Engine) -> None:
    write_batch(
        engine, [(NOON, record("req_a", ttft=0.25, latency=1.5, stream=True, status=502, error="ProviderServerError"))]
    )
    with engine.connect() as conn:
        row = conn.execute(select(request_log)).mappings().one()
    assert row["at"] == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert (row["request_id"], row["key_name"], row["model"], row["endpoint_id"], row["op"]) == (
        "req_a",
        "team-a",
        "m",
        "p/m",
        "chat",
    )
    assert (row["stream"], row["attempts"], row["status"], row["error"]) == (True, 1, 502, "ProviderServerError")
    assert (row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"]) == (100, 40, 10)
    assert row["ttft_ms"] == pytest.approx(250.0) and row["latency_ms"] == pytest.approx(1500.0)
    assert row["cost_usd"] == pytest.approx(0.001)
    assert row["request_body"] is None and row["response_body"] is None  # metadata only by default


def test_the_client_api_is_kept_beside_the_routed_op(engine: Engine) -> None:
    write_batch(engine, [(NOON, record("req_r", api="responses")), (NOON, record("req_m", api="messages"))])
    with engine.connect() as conn:
        rows = conn.execute(select(request_log.c.request_id, request_log.c.op, request_log.c.api)).all()
    assert sorted(map(tuple, rows)) == [("req_m", "chat", "messages"), ("req_r", "chat", "responses")]


def test_bodies_are_kept_when_the_record_carries_them(engine: Engine) -> None:
    r = record("req_b")
    r.request_body = {"model": "m", "messages": [{"role": "user", "content": "héllo"}]}
    r.response_body = b'{"choices":[]}'
    write_batch(engine, [(NOON, r)])
    with engine.connect() as conn:
        row = conn.execute(select(request_log.c.request_body, request_log.c.response_body)).one()
    assert row[0] == '{"model":"m","messages":[{"role":"user","content":"héllo"}]}'
    assert row[1] == '{"choices":[]}'


def test_spend_adds_up_per_key_and_day_across_batches(engine: Engine) -> None:
    write_batch(engine, [(NOON, record("1")), (NOON + 1, record("2", cost=0.002)), (NOON, record("3", key="team-b"))])
    write_batch(engine, [(NOON + 60, record("4", prompt=1, cached=0, completion=1, cost=0.5))])
    write_batch(engine, [(NOON + DAY, record("5")), (NOON, record("6", key=None))])

    got = spend(engine)
    day, next_day = date(2026, 3, 1), date(2026, 3, 2)
    assert got[("team-a", day)][:4] == (3, 201, 80, 21)
    assert got[("team-a", day)][4] == pytest.approx(0.503)
    assert got[("team-b", day)][0] == 1
    assert got[("team-a", next_day)][0] == 1
    assert got[("", day)][0] == 1  # open access: no key name
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(request_log)).scalar_one() == 6


def test_spend_rows_group_by_utc_day() -> None:
    late = datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC).timestamp()
    rows = spend_rows([(late, record("1")), (late + 2, record("2")), (late, record("3", key="x"))])
    assert sorted((r["key_name"], r["day"], r["requests"]) for r in rows) == [
        ("team-a", date(2026, 3, 1), 1),
        ("team-a", date(2026, 3, 2), 1),
        ("x", date(2026, 3, 1), 1),
    ]


def test_a_failed_batch_writes_nothing(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_spend(conn: object, rows: object) -> None:
        raise RuntimeError("spend upsert failed")

    monkeypatch.setattr(requests_repo, "add_spend", broken_spend)
    with pytest.raises(RuntimeError):
        write_batch(engine, [(NOON, record("a")), (NOON, record("b"))])
    assert spend(engine) == {}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(request_log)).scalar_one() == 0  # rolled back


def test_a_record_the_database_refuses_does_not_block_the_rest(engine: Engine) -> None:
    bad = record("bad")
    bad.attempts = None  # type: ignore[assignment]  # NOT NULL: refused by both engines
    rejected = write_batch(engine, [(NOON, record("a")), (NOON, bad), (NOON, record("b"))])
    assert [r.request_id for _, r in rejected] == ["bad"]
    with engine.connect() as conn:
        assert sorted(conn.execute(select(request_log.c.request_id)).scalars()) == ["a", "b"]
    assert spend(engine)[("team-a", date(2026, 3, 1))][0] == 2


def test_long_values_are_cut_to_their_columns(engine: Engine) -> None:
    r = record("r" * 300, key="k" * 300, endpoint="e" * 300, error="E" * 100, model="m" * 300)
    assert write_batch(engine, [(NOON, r)]) == []
    with engine.connect() as conn:
        row = conn.execute(select(request_log)).mappings().one()
    assert (len(row["request_id"]), len(row["key_name"]), len(row["endpoint_id"]), len(row["error"])) == (
        128,
        128,
        256,
        64,
    )
    assert spend(engine)[("k" * 128, date(2026, 3, 1))][0] == 1


def test_refused_callers_are_logged_but_not_spend(engine: Engine) -> None:
    write_batch(
        engine,
        [
            (NOON, record("ok", key=None)),
            (NOON, record("denied", key=None, status=401, prompt=0, cached=0, completion=0, cost=0.0)),
        ],
    )
    assert spend(engine)[("", date(2026, 3, 1))][0] == 1
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(request_log)).scalar_one() == 2


def test_the_bulk_path_names_every_column() -> None:
    assert set(COLUMNS) == set(request_log.c.keys()) - {"id"} and len(COLUMNS) == len(set(COLUMNS))
