"""Persistence's periodic jobs: a stalled database read times out (an outage, retried next round),
and every job and the writer have a heartbeat in the app's LoopHealth."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.catalog import Catalog
from gateway.config import load_config
from gateway.persistence.runtime import DATABASE_OUTAGES, Persistence
from kernel.tasks import LoopHealth


class Stalled:
    async def refresh(self) -> None:
        await asyncio.sleep(3600)  # a half-open connection: the read never returns


async def test_a_stalled_refresh_times_out_as_an_outage(tmp_path: Path) -> None:
    settings = load_config(
        environ={},
        database={"url": f"sqlite:///{tmp_path / 'gw.db'}"},
        persistence={"enabled": True, "writer": "thread", "spill_path": str(tmp_path / "spill"), "write_timeout": 0.2},
    )
    loops = LoopHealth()
    p = Persistence(settings, loops=loops)
    p._refresher, p._catalog = Stalled(), Catalog([], created=0)  # type: ignore[assignment]
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        await p._refresh()
    assert time.monotonic() - started < 2
    assert isinstance(info.value, DATABASE_OUTAGES)  # counted as the database being away, not a bug
    assert "record_writer" in loops.loops
    await p.writer._store.aclose()
    p.db.close()


async def test_closing_with_a_stalled_database_fits_the_budget_and_spills(tmp_path: Path) -> None:
    from gateway.persistence.stores import ThreadStore
    from tests.gateway.persistence.factories import record

    settings = load_config(
        environ={},
        database={"url": f"sqlite:///{tmp_path / 'gw.db'}"},
        persistence={"enabled": True, "writer": "thread", "spill_path": str(tmp_path / "spill"), "shutdown_timeout": 30},
    )
    p = Persistence(settings)
    release = __import__("threading").Event()

    def stalled(batch: Any) -> list[Any]:
        release.wait(10)
        return []

    p.writer._store = ThreadStore(stalled)
    p.writer.start()
    for i in range(3):
        p.queue.submit(record(f"r{i}"))
    p.queue.ready.set()
    await asyncio.sleep(0.1)  # the writer is now stuck in its write
    started = time.monotonic()
    await p.aclose(timeout=1.0)
    assert time.monotonic() - started < 1.5  # not the 30 s shutdown_timeout
    assert p.spill.size > 0 and p.stats.spilled == 3  # the records are on disk, not lost
    release.set()
