"""Request log inserts and the spend per key and day, aggregated from the same batch in one
transaction (an upsert that adds to the day's row, so replicas and replays add up)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import date
from typing import Any, cast

import psycopg
from sqlalchemy import Connection, Engine, Insert, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DataError, IntegrityError

from gateway.persistence.models import spend_daily
from gateway.persistence.records import COLUMNS, Stamped, to_values
from gateway.persistence.types import utc

# The database refused the data itself, through SQLAlchemy or straight from the driver (COPY).
_DATA_ERRORS = (DataError, IntegrityError, psycopg.DataError, psycopg.IntegrityError, sqlite3.IntegrityError)
_SUMS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd")


def upsert(conn: Connection, table: Table) -> Any:
    """The dialect's INSERT with ON CONFLICT support (SQLite and PostgreSQL spell it alike)."""
    module = postgresql if conn.dialect.name == "postgresql" else sqlite
    return module.insert(table)


def spend_rows(batch: Sequence[Stamped]) -> list[dict[str, Any]]:
    """One row per (key, UTC day) in the batch. Requests refused at authentication (401, 403)
    belong to no key and cost nothing: they are in the request log, not in the spend."""
    totals: dict[tuple[str, date], dict[str, Any]] = {}
    for at, r in batch:
        if r.status in (401, 403):
            continue
        key = ((r.key_name or "")[:128], utc(at).date())
        row = totals.get(key)
        if row is None:
            row = totals[key] = {"key_name": key[0], "day": key[1], **dict.fromkeys(_SUMS, 0)}
            row["cost_usd"] = 0.0
        row["requests"] += 1
        row["prompt_tokens"] += r.prompt_tokens
        row["cached_tokens"] += r.cached_tokens
        row["completion_tokens"] += r.completion_tokens
        row["cost_usd"] += r.cost_usd
    # A fixed order, so concurrent writers (replicas) lock the same rows in the same order.
    return [totals[k] for k in sorted(totals)]


def add_spend(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    stmt: Insert = upsert(conn, spend_daily)
    stmt = stmt.on_conflict_do_update(  # type: ignore[attr-defined]
        index_elements=["key_name", "day"],
        set_={name: spend_daily.c[name] + stmt.excluded[name] for name in _SUMS},  # type: ignore[attr-defined]
    )
    for row in rows:  # one statement per (key, day): few rows, and no row hit twice in one statement
        conn.execute(stmt, row)


def write_batch(engine: Engine, batch: Sequence[Stamped]) -> list[Stamped]:
    """Insert the records and add them to the spend table, all or nothing. If the database refuses
    the data itself (not a connection failure), write them one by one instead and return those it
    refuses, so one bad record never blocks the rest."""
    if not batch:
        return []
    try:
        _write(engine, batch)
    except _DATA_ERRORS:
        if len(batch) == 1:
            return list(batch)
        rejected = []
        for item in batch:
            try:
                _write(engine, [item])
            except _DATA_ERRORS:
                rejected.append(item)
        return rejected
    return []


def _write(engine: Engine, batch: Sequence[Stamped]) -> None:
    with engine.begin() as conn:
        insert_log(conn, batch)
        add_spend(conn, spend_rows(batch))


_SQLITE_INSERT = f"INSERT INTO request_log ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_PG_COPY = f"COPY request_log ({', '.join(COLUMNS)}) FROM STDIN"


def insert_log(conn: Connection, batch: Sequence[Stamped]) -> None:
    """Bulk insert through the driver's C paths: COPY on PostgreSQL, sqlite3's executemany on
    SQLite. Per row that is a tuple and no SQLAlchemy work, which matters because the writer
    thread shares the GIL with the event loop: a Python-heavy batch would stall requests."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(_SQLITE_INSERT, [to_values(at, r, sqlite=True) for at, r in batch])
        return
    raw = cast("psycopg.Connection[Any] | None", conn.connection.dbapi_connection)  # the psycopg 3 driver's
    assert raw is not None
    with raw.cursor() as cursor, cursor.copy(_PG_COPY) as copy:
        for at, r in batch:
            copy.write_row(to_values(at, r, sqlite=False))
