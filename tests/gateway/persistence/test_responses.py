"""The durable copy of stored responses, on SQLite and PostgreSQL: written behind (read from the
queue until written), replaced on rewrite, never returned past its TTL and then removed by
retention, forgotten on delete (also while a write of it is in flight), bounded while the
database is away."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from gateway.persistence.config import DatabaseConfig, RetentionConfig
from gateway.persistence.engine import Database
from gateway.persistence.models import stored_responses
from gateway.persistence.responses import ResponseArchive, _delete, _upsert
from gateway.persistence.retention import enforce
from gateway.persistence.runtime import DATABASE_OUTAGES
from gateway.state_store.memory import MemoryStore
from gateway.state_store.responses import ResponseStore, StoredResponse
from tests.fakes.clock import FakeClock

T = TypeVar("T")

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


class HeldUpsert(Database):
    """The real database, but an upsert, on its thread, waits for `release` and then for every
    DELETE already sent to commit (the order that lost a delete: a slow write on one thread, a
    quick delete on another); with `fail_after` it reports an outage after it committed."""

    def __init__(self, engine: Engine, *, fail_after: bool = False) -> None:
        super().__init__(engine)
        self.fail_after = fail_after
        self.held = asyncio.Event()  # the upsert's thread has started
        self.release = threading.Event()
        self.deletes: list[threading.Event] = []

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        if fn is _delete:
            done = threading.Event()
            self.deletes.append(done)

            def delete(engine: Engine, key: str) -> bool:
                try:
                    return _delete(engine, key)
                finally:
                    done.set()

            return await super().run(delete, *args, **kwargs)  # type: ignore[arg-type]
        if fn is _upsert:

            def upsert(engine: Engine, rows: list[dict[str, Any]]) -> None:
                loop.call_soon_threadsafe(self.held.set)
                self.release.wait()
                for sent in list(self.deletes):
                    sent.wait()
                _upsert(engine, rows)
                if self.fail_after:
                    raise OperationalError("COMMIT", None, ConnectionResetError("reply lost"))

            return await super().run(upsert, *args, **kwargs)  # type: ignore[arg-type]
        return await super().run(fn, *args, **kwargs)

    def close_pool(self) -> None:
        self.release.set()  # a failed test must not leave the pool's thread waiting
        self._pool.shutdown(wait=True)


@pytest.fixture
def held(engine: Engine) -> Iterator[HeldUpsert]:
    database = HeldUpsert(engine)
    yield database
    database.close_pool()


async def forget_during_flush(
    db: HeldUpsert, forget: Callable[[], Awaitable[bool]], flush: Awaitable[int]
) -> asyncio.Task[int]:
    """Start a flush; once it holds its batch (its upsert not yet run), forget, then let the
    upsert go. Returns the flush."""
    flushing = asyncio.ensure_future(flush)
    await db.held.wait()
    forgetting = asyncio.ensure_future(forget())
    await asyncio.sleep(0)  # one loop step: the forget runs up to its first wait (a DELETE sent, or not)
    db.release.set()
    assert await forgetting is True
    return flushing


async def test_a_forget_during_a_flush_wins_over_its_upsert(held: HeldUpsert, engine: Engine) -> None:
    one = archive(held)
    one.keep(KEY, b"deleted", 60.0)
    one.keep(KEY + "x", b"kept", 60.0)
    flushing = await forget_during_flush(held, lambda: one.forget(KEY), one.flush())
    assert await flushing == 2
    assert await archive(held).fetch(KEY) is None and await one.fetch(KEY) is None
    assert await archive(held).fetch(KEY + "x") == b"kept" and rows(engine) == 1


async def test_a_deleted_response_is_not_read_back_from_the_archive(held: HeldUpsert) -> None:
    one = archive(held)
    store = ResponseStore(MemoryStore(), ttl_s=60.0, max_bytes=1 << 20, archive=one)
    assert await store.put("owner", StoredResponse({"id": "resp_gone"}, [], [])) is None
    await (await forget_during_flush(held, lambda: store.delete("owner", "resp_gone"), one.flush()))
    assert await store.get("owner", "resp_gone") is None  # a state-store miss falls back to the archive


async def test_a_forget_wins_when_the_upsert_reports_a_failure(engine: Engine) -> None:
    db = HeldUpsert(engine, fail_after=True)
    try:
        one = archive(db)
        one.keep(KEY, b"deleted", 60.0)
        flushing = await forget_during_flush(db, lambda: one.forget(KEY), one.flush())
        with pytest.raises(OperationalError):
            await flushing
        assert await archive(db).fetch(KEY) is None and rows(engine) == 0
    finally:
        db.close_pool()


async def test_a_forget_waits_for_the_write_of_a_cancelled_flush(held: HeldUpsert, engine: Engine) -> None:
    """Cancelling the flush (the shutdown's time is up) does not stop the database's thread: the
    write is still in flight, and the forget still waits for it."""
    one = archive(held)
    one.keep(KEY, b"deleted", 60.0)
    flushing = asyncio.ensure_future(one.flush())
    await held.held.wait()
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    forgetting = asyncio.ensure_future(one.forget(KEY))
    await asyncio.sleep(0)  # one loop step, as above
    held.release.set()
    assert await forgetting is True
    assert await archive(held).fetch(KEY) is None and rows(engine) == 0
