"""Portable column types and SQL constructs: the same code on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator

# An auto-incrementing big integer key: SQLite only auto-increments INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both engines (SQLite stores them naive, in UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass a timezone-aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc(ts: float) -> datetime:
    """Epoch seconds -> an aware UTC datetime."""
    return datetime.fromtimestamp(ts, UTC)


class epoch_bucket(FunctionElement[int]):
    """``epoch_bucket(col, seconds)``: the start (epoch seconds) of the bucket `col` falls in."""

    type = BigInteger()
    inherit_cache = True
    name = "epoch_bucket"


@compiles(epoch_bucket, "postgresql")
def _pg_bucket(element: epoch_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    col, seconds = list(element.clauses)
    c, s = compiler.process(col, **kw), compiler.process(seconds, **kw)
    return f"CAST(FLOOR(EXTRACT(EPOCH FROM {c}) / {s}) * {s} AS BIGINT)"


@compiles(epoch_bucket, "sqlite")
def _sqlite_bucket(element: epoch_bucket, compiler: SQLCompiler, **kw: Any) -> str:
    col, seconds = list(element.clauses)
    c, s = compiler.process(col, **kw), compiler.process(seconds, **kw)
    # julianday() parses SQLAlchemy's stored text; CAST truncates, which is floor for positive times.
    return f"(CAST(ROUND((julianday({c}) - 2440587.5) * 86400.0, 3) / {s} AS INTEGER) * {s})"
