"""`Persistence`: the database, the record queue and writer, and the periodic jobs, built for one
app (no I/O at construction) and started and closed by its lifespan.

Start-up never fails for want of a database: the gateway serves, records queue and spill, keys
from config still work (others get 503 until the first successful round loads the stored keys),
and the first successful round also syncs the catalog.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as SATimeoutError

from gateway.catalog import Catalog
from gateway.health_states import HealthStates
from gateway.persistence.catalog import sync_catalog
from gateway.persistence.config import PersistenceSettings
from gateway.persistence.engine import Database, safe_url
from gateway.persistence.health import record_transition
from gateway.persistence.periodic import Periodic
from gateway.persistence.refresher import Refresher
from gateway.persistence.requests import write_batch
from gateway.persistence.responses import MAX_PENDING_BYTES, ResponseArchive
from gateway.persistence.retention import enforce
from gateway.persistence.spill import SpillFile
from gateway.persistence.stores import ProcessStore, StoreError, ThreadStore
from gateway.persistence.writer import RecordQueue, RecordWriter, WriterStats, writer_limit_s
from gateway.pipeline.auth import Authenticator
from kernel.health import Transition
from kernel.tasks import LoopHealth

log = logging.getLogger("gateway.persistence")

# What a database job's failure means when the database is away (the job is fine, it retries);
# anything else is a bug, logged with its traceback (kernel.tasks).
DATABASE_OUTAGES: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, SATimeoutError, StoreError, OSError, TimeoutError)


class Persistence:
    def __init__(
        self, settings: PersistenceSettings, *, wall: Callable[[], float] = time.time, loops: LoopHealth | None = None
    ) -> None:
        cfg = settings.persistence
        self.settings = settings
        self.wall = wall
        self.loops = loops or LoopHealth()
        self.db = Database.from_config(settings.database)
        self.stats = WriterStats()
        self.spill = SpillFile(cfg.spill_path, cfg.spill_max_bytes, repair=True)
        self.queue = RecordQueue(cfg.queue_size, cfg.batch_size, self.spill, self.stats, wall=wall)
        store = (
            ProcessStore(settings.database)
            if cfg.writer == "process"
            else ThreadStore(partial(write_batch, self.db.engine))
        )
        self.writer = RecordWriter(
            self.queue, self.spill, store, cfg, self.stats, beat=self.loops.register("record_writer", writer_limit_s(cfg), log)
        )
        # The durable copy of stored responses (`responses.durable`; idle unless the app uses it).
        self.responses = ResponseArchive(
            self.db, max_pending_bytes=MAX_PENDING_BYTES, outages=DATABASE_OUTAGES, wall=wall
        )
        self._jobs: list[Periodic] = []
        self._closing = threading.Event()  # stops a retention pass between batches
        self._synced = False
        self._catalog: Catalog | None = None
        self._refresher: Refresher | None = None

    @property
    def capacity(self) -> int:
        return self.settings.persistence.queue_size

    async def start(self, catalog: Catalog, auth: Authenticator, health: HealthStates, *, limits: Any = None) -> None:
        self._catalog = catalog
        self._refresher = Refresher(
            self.db, auth, health, timeout=self.settings.persistence.refresh_timeout, limits=limits, wall=self.wall
        )
        try:
            await self._refresh()
        except Exception as exc:
            log.warning(
                "persistence: the database at %s is not answering (%s); serving anyway, records queue and spill",
                safe_url(self.settings.database.url),
                str(exc).strip().split("\n")[0],
            )
        self.writer.start()
        cfg = self.settings.persistence
        retention = self.settings.retention.interval
        self._jobs = [
            Periodic(
                "refresh keys and endpoint states",
                cfg.refresh_interval,
                self._refresh,
                beat=self.loops.register("key_refresh", 3 * (cfg.refresh_interval + cfg.write_timeout), log),
                outages=DATABASE_OUTAGES,
            ),
            Periodic(
                "archive stored responses",
                cfg.flush_interval,
                self.responses.flush,
                beat=self.loops.register("response_archive", 3 * (cfg.flush_interval + cfg.write_timeout), log),
                outages=DATABASE_OUTAGES,
            ),
            Periodic(
                "retention",
                retention,
                self.enforce_retention,
                # A pass deletes in small batches with pauses: it may run long.
                beat=self.loops.register("retention", 2 * retention + 3600, log),
                outages=DATABASE_OUTAGES,
            ),
        ]
        for job in self._jobs:
            job.start()

    async def _refresh(self) -> None:
        assert self._refresher is not None and self._catalog is not None
        async with asyncio.timeout(self.settings.persistence.write_timeout):  # a stalled read is an outage
            await self._refresher.refresh()
            if not self._synced:
                await self.db.run(sync_catalog, self.settings, self._catalog.endpoints, self.wall())
                self._synced = True

    async def enforce_retention(self) -> dict[str, int]:
        deleted = await self.db.run(enforce, self.settings.retention, now=self.wall(), stop=self._closing.is_set)
        if any(deleted.values()):
            log.info("retention: deleted %s", ", ".join(f"{n} from {t}" for t, n in deleted.items() if n))
        return deleted

    async def record_transition(self, t: Transition, *, actor: str | None = None, action: str | None = None) -> bool:
        """Store a health transition (and an operator's action); False when the database failed."""
        try:
            await self.db.run(record_transition, t, actor=actor, action=action)
        except Exception as exc:
            log.warning(
                "persistence: could not store the %s -> %s transition of %s: %s",
                t.from_state,
                t.to_state,
                t.endpoint_id,
                exc,
            )
            return False
        return True

    async def _archive_last(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self.responses.flush()
        except DATABASE_OUTAGES as exc:  # TimeoutError among them
            log.warning("persistence: stored responses not archived at shutdown: %s", exc)

    async def aclose(self, timeout: float | None = None) -> None:
        """Stop the jobs, flush the queue (what the database does not take spills), close the
        database; within `timeout` seconds when given (the app's shutdown budget)."""
        end = None if timeout is None else time.monotonic() + timeout
        self._closing.set()
        for job in self._jobs:
            await job.aclose()
        await self._archive_last(None if timeout is None else timeout * 0.1)
        # Most of the budget is the flush's; closing the store and the database get the rest.
        await self.writer.aclose(None if timeout is None else timeout * 0.8)
        close = asyncio.get_running_loop().run_in_executor(None, self.db.close)  # waits for queries in flight
        try:
            await asyncio.wait_for(close, None if end is None else max(0.1, end - time.monotonic()))
        except TimeoutError:
            log.warning("persistence: database queries still running at the end of the shutdown budget")
