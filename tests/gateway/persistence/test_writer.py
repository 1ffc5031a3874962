"""The record queue and the background writer, over a fake `write` (no database): batching,
retry with backoff, spill past the queue's bound, drops past the spill file's bound (counted),
replay when the store answers again, flush at shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from gateway.persistence.config import PersistenceConfig
from gateway.persistence.records import Stamped, encode_line, encode_row
from gateway.persistence.spill import SpillFile
from gateway.persistence.stores import ThreadStore
from gateway.persistence.writer import RecordQueue, RecordWriter, WriterStats
from tests.gateway.persistence.factories import record


class Store:
    """A fake database: keeps what it is given, fails while `down`."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.batches: list[int] = []
        self.down = False

    def write(self, batch: Sequence[Stamped]) -> list[Stamped]:
        if self.down:
            raise ConnectionError("database is down")
        self.batches.append(len(batch))
        rejected = [item for item in batch if item[1].request_id.startswith("bad")]
        self.rows.extend(r.request_id for _, r in batch if not r.request_id.startswith("bad"))
        return rejected


def build(
    tmp_path: Path, store: Store, **overrides: object
) -> tuple[RecordQueue, RecordWriter, WriterStats, SpillFile]:
    options: dict[str, object] = {
        "queue_size": 100,
        "batch_size": 10,
        "flush_interval": 0.02,
        "retry_initial": 0.01,
        "retry_max": 0.02,
        "spill_path": str(tmp_path / "spill.jsonl"),
        "shutdown_timeout": 2.0,
    }
    options.update(overrides)
    config = PersistenceConfig(**options)  # type: ignore[arg-type]
    stats = WriterStats()
    spill = SpillFile(config.spill_path, config.spill_max_bytes)
    queue = RecordQueue(config.queue_size, config.batch_size, spill, stats, wall=lambda: 1000.0)
    return queue, RecordWriter(queue, spill, ThreadStore(store.write), config, stats), stats, spill


async def until(predicate: object, timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.005)


async def test_full_batches_and_the_flush_interval(tmp_path: Path) -> None:
    store = Store()
    queue, writer, stats, _ = build(tmp_path, store, flush_interval=0.05)
    writer.start()
    for i in range(25):
        queue.submit(record(f"r{i}"))
    await until(lambda: len(store.rows) == 25)
    assert store.batches[:2] == [10, 10]  # full batches, then the rest on the interval
    assert stats.written == 25 and len(queue) == 0
    await writer.aclose()


async def test_submit_never_blocks_and_stamps_the_time(tmp_path: Path) -> None:
    store = Store()
    queue, _, _, _ = build(tmp_path, store)
    queue.submit(record("r"))
    ((at, r),) = queue.take(5)
    assert at == 1000.0 and r.request_id == "r"


async def test_database_down_then_back_loses_nothing(tmp_path: Path) -> None:
    store = Store()
    store.down = True
    queue, writer, stats, spill = build(tmp_path, store, queue_size=20)
    writer.start()
    for i in range(50):  # 20 wait in the queue, 30 spill
        queue.submit(record(f"r{i}"))
        await asyncio.sleep(0)
    await until(lambda: stats.write_errors >= 2)
    assert not stats.db_up
    assert len(queue) == 20 and stats.spilled == 30 and spill.pending() and spill.size > 0
    assert stats.dropped == 0

    store.down = False
    await until(lambda: stats.written + stats.replayed == 50 and not spill.pending())
    assert sorted(store.rows, key=lambda s: int(s[1:])) == [f"r{i}" for i in range(50)]
    assert stats.replayed == 30 and stats.db_up and not spill.pending()
    await writer.aclose()


async def test_overflow_past_every_bound_is_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store()
    store.down = True
    one_line = len(encode_line(1000.0, record("r00")))
    queue, writer, stats, _ = build(tmp_path, store, queue_size=5, spill_max_bytes=3 * one_line)
    with caplog.at_level(logging.ERROR, logger="gateway.persistence"):
        for i in range(20):
            queue.submit(record(f"r{i:02d}"))
    assert (len(queue), stats.spilled, stats.dropped) == (5, 3, 12)
    assert "dropped 1 request record(s)" in caplog.text  # logged (then rate-limited)
    await writer.aclose()


async def test_shutdown_flushes_what_is_queued(tmp_path: Path) -> None:
    store = Store()
    queue, writer, stats, _ = build(tmp_path, store, flush_interval=60.0, batch_size=1000)
    writer.start()
    for i in range(7):
        queue.submit(record(f"r{i}"))
    await asyncio.sleep(0.01)
    assert store.rows == []  # neither a full batch nor the interval yet
    await writer.aclose()
    assert len(store.rows) == 7 and stats.written == 7


async def test_shutdown_with_the_database_down_spills_the_queue(tmp_path: Path) -> None:
    store = Store()
    store.down = True
    queue, writer, stats, spill = build(tmp_path, store)
    writer.start()
    for i in range(7):
        queue.submit(record(f"r{i}"))
    await writer.aclose()
    assert store.rows == [] and len(queue) == 0 and stats.spilled == 7

    # The next process replays them.
    store.down = False
    queue2, writer2, stats2, _ = build(tmp_path, store)
    writer2.start()
    await until(lambda: stats2.replayed == 7)
    assert len(store.rows) == 7
    await writer2.aclose()


async def test_a_failed_batch_goes_back_to_the_front(tmp_path: Path) -> None:
    store = Store()
    queue, _, stats, spill = build(tmp_path, store, queue_size=8)
    for i in range(8):
        queue.submit(record(f"r{i}"))
    batch = queue.take(5)
    queue.submit(record("late1"))
    queue.submit(record("late2"))
    queue.put_back(batch)  # room for three: r3 and r4 spill
    assert [r.request_id for _, r in queue.take(100)] == ["r0", "r1", "r2", "r5", "r6", "r7", "late1", "late2"]
    assert stats.spilled == 2
    spill.rotate()
    assert [r.request_id for b, _ in spill.replay_batches(10) for _, r in b] == ["r3", "r4"]


async def test_records_the_database_refuses_are_counted_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store()
    queue, writer, stats, _ = build(tmp_path, store)
    writer.start()
    with caplog.at_level(logging.ERROR, logger="gateway.persistence"):
        for name in ("ok1", "bad1", "ok2"):
            queue.submit(record(name))
        await until(lambda: stats.written + stats.rejected == 3)
    assert (stats.written, stats.rejected, stats.write_errors) == (2, 1, 0)
    assert store.rows == ["ok1", "ok2"] and "refused 1 request record(s) as data, e.g. bad1" in caplog.text
    await writer.aclose()


async def test_a_refused_record_in_a_replay_is_counted_once(tmp_path: Path) -> None:
    store = Store()
    _, writer, stats, spill = build(tmp_path, store)
    for name in ("ok1", "bad1", "ok2"):
        spill.append(1000.0, record(name))
    writer.start()
    await until(lambda: not spill.pending() and stats.replayed == 2)
    assert (stats.written, stats.replayed, stats.rejected) == (0, 2, 1)
    assert store.rows == ["ok1", "ok2"]
    await writer.aclose()


def too_deep_record(request_id: str) -> object:
    body: dict[str, object] = {}
    for _ in range(300):  # past orjson's 255 levels: it cannot be written as JSON
        body = {"a": body}
    bad = record(request_id)
    bad.request_body = body
    return bad


class SerialisingStore(Store):
    """Serialises each batch first, as both real stores do (the worker's pipe, the driver's rows)."""

    def write(self, batch: Sequence[Stamped]) -> list[Stamped]:
        for at, r in batch:
            encode_row(at, r)
        return super().write(batch)


async def test_a_record_that_cannot_be_serialised_is_dropped_and_counted_and_the_rest_are_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SerialisingStore()
    queue, writer, stats, _ = build(tmp_path, store)
    writer.start()
    with caplog.at_level(logging.ERROR, logger="gateway.persistence"):
        queue.submit(record("ok1"))
        queue.submit(too_deep_record("deep"))  # type: ignore[arg-type]
        for i in range(12):
            queue.submit(record(f"after{i}"))
        await until(lambda: stats.written == 13)
    assert stats.unserialisable == 1 and stats.write_errors == 0 and stats.db_up
    assert store.rows == ["ok1", *(f"after{i}" for i in range(12))]
    assert "could not serialise 1 request record(s)" in caplog.text and "deep" in caplog.text
    await writer.aclose()
    assert len(queue) == 0 and not (tmp_path / "spill.jsonl").exists()


async def test_an_unserialisable_record_past_the_queue_bound_is_dropped_not_raised(tmp_path: Path) -> None:
    store = Store()
    queue, writer, stats, spill = build(tmp_path, store, queue_size=1)
    queue.submit(record("first"))
    queue.submit(too_deep_record("deep"))  # type: ignore[arg-type]  # to the spill file: cannot be a line
    queue.submit(record("spilled"))
    assert stats.unserialisable == 1 and stats.spilled == 1
    spill.rotate()
    assert [r.request_id for b, _ in spill.replay_batches(10) for _, r in b] == ["spilled"]


async def test_the_replay_rotation_fsyncs_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import gateway.persistence.spill as spill_module

    threads: list[str] = []
    real_fsync = spill_module.os.fsync
    monkeypatch.setattr(spill_module.os, "fsync", lambda fd: (threads.append(threading.current_thread().name), real_fsync(fd)))
    store = Store()
    store.down = True
    queue, writer, stats, spill = build(tmp_path, store, queue_size=2)
    writer.start()
    for i in range(6):
        queue.submit(record(f"r{i}"))
    await until(lambda: stats.write_errors >= 1 and spill.pending())
    store.down = False
    await until(lambda: stats.written + stats.replayed == 6 and not spill.pending())
    await writer.aclose()
    assert threads and threading.main_thread().name not in threads


async def test_the_writer_survives_a_failing_spill_flush(tmp_path: Path) -> None:
    store = Store()
    queue, writer, stats, spill = build(tmp_path, store)
    real_flush = spill.flush
    failures = [OSError(28, "No space left on device")]

    def flush() -> None:
        if failures:
            raise failures.pop()
        real_flush()

    spill.flush = flush  # type: ignore[method-assign]
    writer.start()
    queue.submit(record("r0"))
    await until(lambda: store.rows == ["r0"])
    assert stats.write_errors == 1 and writer.beat.last_success is not None
    await writer.aclose()


async def test_a_stalled_write_counts_as_down_and_is_retried(tmp_path: Path) -> None:
    import threading

    release = threading.Event()
    store = Store()
    stalls = [True]

    def write(batch: Sequence[Stamped]) -> list[Stamped]:
        if stalls:
            stalls.pop()
            release.wait(5)  # a half-open connection: the call never returns
        return store.write(batch)

    config = PersistenceConfig(
        queue_size=100, batch_size=10, flush_interval=0.02, retry_initial=0.01, retry_max=0.02,
        spill_path=str(tmp_path / "spill.jsonl"), write_timeout=0.2,
    )
    stats = WriterStats()
    spill = SpillFile(config.spill_path, config.spill_max_bytes)
    queue = RecordQueue(config.queue_size, config.batch_size, spill, stats)
    class TwoThreads(ThreadStore):
        def __init__(self) -> None:
            super().__init__(write)
            from concurrent.futures import ThreadPoolExecutor

            self._thread = ThreadPoolExecutor(max_workers=2)

    writer = RecordWriter(queue, spill, TwoThreads(), config, stats)
    writer.start()
    queue.submit(record("r0"))
    await until(lambda: not stats.db_up and stats.write_errors >= 1)
    assert "longer than 0.2 s" in (stats.last_error or "")
    await until(lambda: stats.db_up and stats.written == 1)  # retried on a fresh call
    assert store.rows == ["r0"]
    release.set()
    await writer.aclose()


class SlowStartStore:
    """A store whose first use starts something slow (the worker process's imports, under load)."""

    def __init__(self, start_seconds: float) -> None:
        self.start_seconds = start_seconds
        self.rows: list[str] = []
        self._started: asyncio.Task[None] | None = None

    async def open(self) -> None:
        await self._start()

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.ensure_future(asyncio.sleep(self.start_seconds))
        await asyncio.shield(self._started)

    async def write(self, batch: Sequence[Stamped]) -> Sequence[Stamped]:
        await self._start()
        self.rows.extend(r.request_id for _, r in batch)
        return []

    async def replay(self, spill: SpillFile, batch_size: int) -> tuple[int, int]:
        return 0, 0

    async def aclose(self) -> None:
        pass


async def test_the_store_starts_with_the_writer_not_at_the_first_write(tmp_path: Path) -> None:
    # The first write came at shutdown (no batch or interval reached), so the worker's start ate the
    # flush budget and every record was spilled (5 s of imports on a loaded machine).
    store = SlowStartStore(start_seconds=0.5)
    config = PersistenceConfig(  # type: ignore[call-arg]
        flush_interval=3600, batch_size=1000, shutdown_timeout=0.3, spill_path=str(tmp_path / "spill.jsonl"))
    stats = WriterStats()
    spill = SpillFile(config.spill_path, config.spill_max_bytes)
    queue = RecordQueue(config.queue_size, config.batch_size, spill, stats, wall=lambda: 1000.0)
    writer = RecordWriter(queue, spill, store, config, stats)
    writer.start()
    for i in range(3):
        queue.submit(record(f"r{i}"))
    await asyncio.sleep(0.7)  # serving for longer than the store takes to start
    await writer.aclose()
    assert store.rows == ["r0", "r1", "r2"] and stats.written == 3
