"""The durable copy of stored responses, on SQLite and PostgreSQL: written behind (read from the
queue until written), replaced on rewrite, never returned past its TTL and then removed by
retention, forgotten on delete, bounded while the database is away."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, func, select

from gateway.persistence.config import DatabaseConfig, RetentionConfig
from gateway.persistence.engine import Database
from gateway.persistence.models import stored_responses
from gateway.persistence.responses import ResponseArchive
from gateway.persistence.retention import enforce
from gateway.persistence.runtime import DATABASE_OUTAGES
from tests.fakes.clock import FakeClock

KEY = "responses:0123abcd:resp_1"


@pytest.fixture
def db(engine: Engine) -> Iterator[Database]:
    database = Database(engine)
    yield database
    database._pool.shutdown(wait=True)  # the engine is the fixture's to dispose


def archive(db: Database, clock: FakeClock | None = None, max_pending_bytes: int = 1 << 20) -> ResponseArchive:
    return ResponseArchive(
        db,
        max_pending_bytes=max_pending_bytes,
        outages=DATABASE_OUTAGES,
        wall=clock or FakeClock(start=1_770_000_000.0),
    )


def rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(stored_responses)).scalar_one())


async def test_written_behind_then_read_from_the_database(db: Database, engine: Engine) -> None:
    one = archive(db)
    one.keep(KEY, b'{"v": 1}', 60.0)
    assert rows(engine) == 0  # keep only queues
    assert await one.fetch(KEY) == b'{"v": 1}'  # this replica reads its own at once
    assert await one.flush() == 1 and await one.flush() == 0
    assert await archive(db).fetch(KEY) == b'{"v": 1}'  # another replica, or after a restart
    assert await archive(db).fetch("responses:0123abcd:resp_other") is None


async def test_a_rewrite_replaces_the_row(db: Database, engine: Engine) -> None:
    one = archive(db)
    one.keep(KEY, b"first", 60.0)
    await one.flush()
    one.keep(KEY, b"second", 60.0)
    await one.flush()
    assert rows(engine) == 1 and await archive(db).fetch(KEY) == b"second"


async def test_past_its_ttl_it_is_gone_and_retention_removes_it(db: Database, engine: Engine) -> None:
    clock = FakeClock(start=1_770_000_000.0)
    one = archive(db, clock)
    one.keep(KEY, b"short-lived", 10.0)
    one.keep(KEY + "x", b"long-lived", 1000.0)
    await one.flush()
    clock.advance(11.0)
    assert await one.fetch(KEY) is None
    assert await one.fetch(KEY + "x") == b"long-lived"
    deleted = enforce(engine, RetentionConfig(), now=clock())
    assert deleted["stored_responses"] == 1 and rows(engine) == 1


async def test_forget_drops_the_row_and_a_queued_write(db: Database, engine: Engine) -> None:
    one = archive(db)
    one.keep(KEY, b"kept", 60.0)
    await one.flush()
    assert await one.forget(KEY) is True
    assert await one.fetch(KEY) is None and await one.forget(KEY) is False
    one.keep(KEY, b"queued only", 60.0)
    assert await one.forget(KEY) is True
    assert await one.flush() == 0 and rows(engine) == 0


async def test_the_queue_is_bounded_in_bytes(db: Database) -> None:
    one = archive(db, max_pending_bytes=10)
    one.keep(KEY, b"12345678", 60.0)
    one.keep(KEY + "x", b"12345678", 60.0)  # would pass the bound: not archived
    assert one.dropped == 1 and await one.fetch(KEY + "x") is None
    one.keep(KEY, b"123456789", 60.0)  # replacing a queued one frees its bytes first
    assert one.dropped == 1 and await one.fetch(KEY) == b"123456789"


async def test_while_the_database_is_away_writes_stay_queued() -> None:
    away = Database.from_config(DatabaseConfig(url="postgresql://postgres@127.0.0.1:1/none", connect_timeout=1))
    try:
        one = archive(away)
        one.keep(KEY, b"waiting", 60.0)
        with pytest.raises(DATABASE_OUTAGES):
            await one.flush()
        assert await one.fetch(KEY) == b"waiting"  # still queued, still readable here
        assert await one.fetch(KEY + "x") is None  # an unreachable archive is a miss, logged
        assert await one.forget(KEY) is True
    finally:
        away.close()
