"""The persistence worker process behind `ProcessStore` (SQLite and PostgreSQL): writes, refused
records by index, database errors as `StoreError`, a dead worker replaced, spill replay."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from gateway.persistence.config import DatabaseConfig
from gateway.persistence.models import request_log
from gateway.persistence.spill import SpillFile
from gateway.persistence.stores import ProcessStore, StoreError
from tests.gateway.persistence.factories import record


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture
async def store(engine: Engine) -> AsyncIterator[ProcessStore]:
    s = ProcessStore(DatabaseConfig(url=url_of(engine)))
    try:
        yield s
    finally:
        await s.aclose()


def stored(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(select(request_log.c.request_id)).scalars())


async def test_write_and_refused_records(store: ProcessStore, engine: Engine) -> None:
    bad = record("bad")
    bad.attempts = None  # type: ignore[assignment]
    ok = record("ok", ttft=0.5)
    ok.request_body = {"messages": [{"role": "user", "content": "hi"}]}
    ok.response_body = b'{"id": "x"}'
    batch = [(time.time(), record("a")), (time.time(), bad), (time.time(), ok)]
    rejected = await store.write(batch)
    assert [r.request_id for _, r in rejected] == ["bad"]
    assert stored(engine) == ["a", "ok"]
    with engine.connect() as conn:
        row = conn.execute(select(request_log).where(request_log.c.request_id == "ok")).mappings().one()
    assert row["ttft_ms"] == 500.0 and row["response_body"] == '{"id": "x"}' and '"content":"hi"' in row["request_body"]


async def test_replay_through_the_worker(store: ProcessStore, engine: Engine, tmp_path: Path) -> None:
    spill = SpillFile(tmp_path / "spill.jsonl", max_bytes=1 << 20)
    for i in range(7):
        spill.append(time.time(), record(f"s{i}"))
    spill.rotate()
    assert await store.replay(spill, 3) == (7, 0)
    assert not spill.replay_path.exists()
    assert stored(engine) == [f"s{i}" for i in range(7)]


async def test_open_starts_the_worker_before_any_write(store: ProcessStore, engine: Engine) -> None:
    await store.open()
    proc = store._proc  # noqa: SLF001 - the process open started
    assert proc is not None and proc.returncode is None
    await store.write([(time.time(), record("after-open"))])
    assert store._proc is proc  # noqa: SLF001 - the first write used it
    assert stored(engine) == ["after-open"]


async def test_a_worker_that_never_served_is_stopped_at_close_without_waiting_for_its_imports(
    store: ProcessStore,
) -> None:
    # Nothing was sent but its config: it holds nothing, so close ends it at once instead of waiting
    # (up to 5 s on a busy machine) for it to finish importing SQLAlchemy and read the end of input.
    await store.open()
    proc = store._proc  # noqa: SLF001 - the process open started
    assert proc is not None
    await store.aclose()
    assert proc.returncode == -signal.SIGKILL


async def test_a_worker_that_served_exits_on_its_own_at_close(store: ProcessStore) -> None:
    await store.write([(time.time(), record("served"))])
    proc = store._proc  # noqa: SLF001 - the process that wrote
    assert proc is not None
    await store.aclose()
    assert proc.returncode == 0


async def test_a_dead_worker_is_replaced(store: ProcessStore, engine: Engine) -> None:
    await store.write([(time.time(), record("first"))])
    proc = store._proc  # noqa: SLF001 - the test kills it
    assert proc is not None
    proc.kill()
    await proc.wait()
    await store.write([(time.time(), record("second"))])  # found dead before the call: a new one
    assert store._proc is not proc  # noqa: SLF001

    proc = store._proc  # noqa: SLF001
    assert proc is not None
    proc.kill()  # dies under the next call (not reaped yet, so it looks alive)
    with pytest.raises(StoreError, match="worker stopped"):
        await store.write([(time.time(), record("lost-call"))])
    await store.write([(time.time(), record("third"))])
    assert stored(engine) == ["first", "second", "third"]


async def test_database_errors_come_back_as_store_errors(tmp_path: Path) -> None:
    store = ProcessStore(DatabaseConfig(url="postgresql://postgres@127.0.0.1:1/none", connect_timeout=1))
    try:
        for _ in range(2):  # the worker survives the error and answers again
            with pytest.raises(StoreError, match="OperationalError"):
                await store.write([(time.time(), record("x"))])
    finally:
        await store.aclose()
    assert store._proc is None  # noqa: SLF001


async def test_a_worker_killed_mid_call_is_reaped_at_close(tmp_path: Path) -> None:
    import asyncio

    store = ProcessStore(DatabaseConfig(url=f"sqlite:///{tmp_path / 'gw.db'}"))
    call = asyncio.ensure_future(store.write([(time.time(), record("x"))]))
    while store._proc is None:  # noqa: SLF001 - wait for the worker, then cut the call short
        await asyncio.sleep(0.01)
    proc = store._proc  # noqa: SLF001
    call.cancel()  # a write timeout, or the shutdown budget running out
    with pytest.raises(asyncio.CancelledError):
        await call
    await store.aclose()
    assert proc.returncode is not None  # waited for, not left to the garbage collector mid-exit


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_the_worker_outlives_a_signal_to_the_whole_process_group(
    store: ProcessStore, engine: Engine, sig: signal.Signals
) -> None:
    """Ctrl-C, `kill -TERM -PGID` and systemd's default KillMode signal every process of the
    gateway at once: the worker keeps writing until the gateway, flushing its queue, closes the pipe."""
    await store.write([(time.time(), record("before"))])
    proc = store._proc  # noqa: SLF001 - the test signals it
    assert proc is not None
    proc.send_signal(sig)
    await asyncio.sleep(0.3)
    assert proc.returncode is None
    await store.write([(time.time(), record("after"))])
    assert store._proc is proc  # noqa: SLF001 - the same worker, not a replacement
    assert stored(engine) == ["after", "before"]
