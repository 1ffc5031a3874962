"""Request records off the hot path: a bounded queue (the accountant's sink) and a background
writer that drains it in batches.

- `RecordQueue.submit` is O(1) and never awaits: it stamps the record, appends it, and wakes the
  writer once a batch is ready. Past the bound it appends the record to the spill file; past the
  spill file's limit (or when the disk fails) the record is dropped, counted and logged.
- `RecordWriter` writes a batch when one is full or every `flush_interval`, through a
  `BatchStore` (a worker process by default, see `stores`), so the event loop never waits on
  the database. When the database fails, the batch goes back to the queue and the writer retries with
  exponential backoff; new records pile up in the queue, then spill. When the database answers
  again, the spill file is replayed first.
- `aclose()` flushes: it writes what is queued (within `shutdown_timeout`), spills the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from gateway.persistence.config import PersistenceConfig
from gateway.persistence.records import Stamped, encode_row
from gateway.persistence.spill import SpillFile, SpillFull
from gateway.persistence.stores import BatchStore, StoreError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.observe import RecordObserver
from kernel.records import RequestRecord
from kernel.tasks import Heartbeat

log = logging.getLogger("gateway.persistence")

# Log a warning about the same trouble at most this often (seconds).
LOG_EVERY = 10.0


def writer_limit_s(cfg: PersistenceConfig) -> float:
    """How long the writer may go without progress (a batch written, or a failed round handled)
    before /readyz calls it stuck: one write's timeout and one retry pause, twice over."""
    return max(60.0, 2 * (cfg.flush_interval + cfg.retry_max + cfg.write_timeout))


@dataclass(slots=True)
class WriterStats:
    written: int = 0
    spilled: int = 0
    replayed: int = 0
    dropped: int = 0
    rejected: int = 0  # refused by the database as data (logged), never retried
    unserialisable: int = 0  # could not be encoded at all (logged), dropped, never retried
    write_errors: int = 0
    db_up: bool = True
    last_error: str | None = None


class RecordQueue(RecordObserver):
    """Where finished requests go on the hot path (a `RequestObserver` that records only)."""

    def __init__(
        self,
        size: int,
        batch_size: int,
        spill: SpillFile,
        stats: WriterStats,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._items: deque[Stamped] = deque()
        self._size = size
        self._batch_size = batch_size
        self._spill = spill
        self._stats = stats
        self._wall = wall
        self.ready = asyncio.Event()  # a batch is waiting
        self._dropped_unlogged = 0
        self._last_drop_log = float("-inf")

    def __len__(self) -> int:
        return len(self._items)

    def finished(self, ctx: RequestContext, record: RequestRecord | None = None) -> None:
        if record is not None:
            self.submit(record)

    def submit(self, record: RequestRecord) -> None:
        items = self._items
        if len(items) < self._size:
            items.append((self._wall(), record))
            if len(items) >= self._batch_size:
                self.ready.set()
            return
        self.overflow((self._wall(), record))

    def overflow(self, item: Stamped) -> None:
        """The queue is full: spill, or drop (counted and logged) when the spill file cannot take it."""
        try:
            self._spill.append(*item)
        except (TypeError, ValueError) as exc:  # orjson cannot encode it: no line to write, ever
            self._stats.unserialisable += 1
            log.error("persistence: could not serialise request record %s (%s); dropped", item[1].request_id, exc)
            return
        except (SpillFull, OSError) as exc:
            self._stats.dropped += 1
            self._dropped_unlogged += 1
            now = time.monotonic()
            if now - self._last_drop_log >= LOG_EVERY:
                log.error(
                    "dropped %d request record(s): the queue is full and the spill file cannot take more (%s)",
                    self._dropped_unlogged,
                    exc,
                )
                self._dropped_unlogged = 0
                self._last_drop_log = now
            return
        self._stats.spilled += 1

    def take(self, n: int) -> list[Stamped]:
        items = self._items
        return [items.popleft() for _ in range(min(n, len(items)))]

    def put_back(self, batch: Sequence[Stamped]) -> None:
        """A batch that could not be written goes back to the front; what no longer fits spills."""
        room = max(0, self._size - len(self._items))
        keep, rest = batch[:room], batch[room:]
        self._items.extendleft(reversed(keep))
        for item in rest:
            self.overflow(item)


class RecordWriter:
    def __init__(
        self,
        queue: RecordQueue,
        spill: SpillFile,
        store: BatchStore,
        config: PersistenceConfig,
        stats: WriterStats,
        *,
        beat: Heartbeat | None = None,
    ) -> None:
        self._queue = queue
        self._spill = spill
        self._store = store
        self._cfg = config
        self.stats = stats
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_error_log = float("-inf")
        # Progress of the loop: every round (written or failed and retried) counts; a stuck one does not.
        self.beat = beat or Heartbeat("record writer", writer_limit_s(config), log=log)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-record-writer")

    async def aclose(self, budget: float | None = None) -> None:
        """Flush: write what is queued within the shutdown timeout (and `budget`, what the app's
        shutdown leaves for it), spill whatever is left."""
        self._stop.set()
        self._queue.ready.set()
        flush = self._cfg.shutdown_timeout if budget is None else min(self._cfg.shutdown_timeout, budget * 0.75)
        end = time.monotonic() + (self._cfg.shutdown_timeout + 5.0 if budget is None else budget)
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, flush)
            except TimeoutError:
                log.warning("persistence: the database did not take the last records in time; spilling them")
            except Exception:  # the task failed: still spill below
                log.exception("persistence: the record writer failed")
        left = self._queue.take(len(self._queue))
        for item in left:
            self._queue.overflow(item)
        self._spill.release()
        try:
            async with asyncio.timeout(max(0.1, end - time.monotonic())):
                await asyncio.to_thread(self._spill.settle)  # the fsync, off the event loop
                await self._store.aclose()
        except TimeoutError:
            log.warning("persistence: closing the spill file and the store overran the shutdown budget")
        if left:
            log.info("persistence: %d request record(s) spilled to %s at shutdown", len(left), self._spill.path)

    async def _run(self) -> None:
        try:
            await self._store.open()
        except Exception as exc:  # the first write starts it again
            self._failed(exc)
        delay = self._cfg.retry_initial
        while not self._stop.is_set():
            await self._wait(self._queue.ready, self._cfg.flush_interval)
            self._queue.ready.clear()
            try:
                self._spill.flush()
                await self._flush(replay=not self._stop.is_set())
            except Exception as exc:  # nothing ends this loop: a failed round is retried
                self._failed(exc)
                self.beat.ok()
                await self._wait(self._stop, delay)
                delay = min(delay * 2, self._cfg.retry_max)
                continue
            self.beat.ok()
            delay = self._cfg.retry_initial
        try:  # last flush at shutdown: the queue only, no replay
            await self._flush(replay=False)
        except Exception as exc:
            self._failed(exc)

    async def _flush(self, *, replay: bool) -> None:
        if replay and self._spill.pending():
            await self._replay()
        while batch := self._queue.take(self._cfg.batch_size):
            try:
                async with asyncio.timeout(self._cfg.write_timeout):  # a stalled write counts as down
                    rejected = await self._store.write(batch)
            except TimeoutError:
                self._queue.put_back(batch)
                raise StoreError(f"a batch write took longer than {self._cfg.write_timeout:g} s") from None
            except (TypeError, ValueError):
                kept = self._drop_unserialisable(batch)
                if kept is None:  # every record encodes: not a serialisation failure
                    raise
                self._queue.put_back(kept)  # the rest go in the next round
                continue
            except BaseException:
                self._queue.put_back(batch)
                raise
            self._count(len(batch) - len(rejected), len(rejected), rejected[0][1].request_id if rejected else None)
            self._recovered()
            self.beat.ok()  # progress, batch by batch

    async def _replay(self) -> None:
        if not self._spill.rotate():
            return
        await asyncio.to_thread(self._spill.settle)  # the rotated file's fsync, off the event loop
        log.info("persistence: replaying spilled request records from %s", self._spill.replay_path)
        # A write timeout per MiB: a big file takes long, a stalled database still counts as down.
        limit = self._cfg.write_timeout * (1 + self._spill.size / 2**20)
        self.beat.expect(limit)
        try:
            async with asyncio.timeout(limit):
                written, refused = await self._store.replay(self._spill, self._cfg.batch_size)
        except TimeoutError:
            raise StoreError(f"replaying the spill file took longer than {limit:g} s") from None
        self._spill.finish_replay()  # the store removed the file; forget its size here too
        self.stats.replayed += written
        self._count(0, refused, None)
        self._recovered()
        log.info("persistence: replayed %d spilled request record(s)", written)

    def _drop_unserialisable(self, batch: list[Stamped]) -> list[Stamped] | None:
        """The batch without the records that cannot be encoded (dropped, counted, logged), or None
        when each of them encodes. Retrying such a record would block every record behind it."""
        good, bad = [], []
        for item in batch:
            try:
                orjson.dumps(encode_row(*item))
            except (TypeError, ValueError) as exc:
                bad.append((item[1].request_id, exc))
            else:
                good.append(item)
        if not bad:
            self._queue.put_back(batch)
            return None
        self.stats.unserialisable += len(bad)
        log.error(
            "persistence: could not serialise %d request record(s), e.g. %s (%s); dropped",
            len(bad),
            bad[0][0],
            bad[0][1],
        )
        return good

    def _count(self, written: int, refused: int, example: str | None) -> None:
        self.stats.written += written
        if refused:
            self.stats.rejected += refused
            log.error(
                "persistence: the database refused %d request record(s) as data%s; they are not kept",
                refused,
                f", e.g. {example}" if example else "",
            )

    def _failed(self, exc: Exception) -> None:
        self.stats.write_errors += 1
        self.stats.db_up = False
        self.stats.last_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        now = time.monotonic()
        if now - self._last_error_log >= LOG_EVERY:
            self._last_error_log = now
            log.warning(
                "persistence: cannot write request records (%s); %d queued, %d spilled so far",
                self.stats.last_error,
                len(self._queue),
                self.stats.spilled,
            )

    def _recovered(self) -> None:
        if not self.stats.db_up:
            log.info("persistence: the database is back")
        self.stats.db_up = True

    @staticmethod
    async def _wait(event: asyncio.Event, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass
