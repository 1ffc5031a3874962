"""The probe worker: the gateway's runtime (catalog, health, shared store, database) without the
HTTP server, running only the probe scheduler (`gwctl worker`). Several workers and gateway replicas
may run at once: the scheduler's leases make each scheduled probe run once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.config import Settings
from gateway.runtime import Runtime  # the same start-up and shutdown as the gateway's

log = logging.getLogger("gateway.probes")


async def run_worker(
    settings: Settings, *, stop: asyncio.Event, client_factory: Callable[[], Any] | None = None
) -> dict[str, int]:
    """Run the scheduler until `stop` is set; returns its counters (runs, skipped, failures)."""
    async with Runtime(settings, client_factory=client_factory, scheduler=True) as runtime:
        scheduler = runtime.scheduler
        assert scheduler is not None
        endpoints = len(runtime.state.catalog.endpoints)
        log.info("probe worker: %d scheduled jobs over %d endpoints", len(scheduler.next_run), endpoints)
        await stop.wait()
    return {"runs": scheduler.runs, "skipped": scheduler.skipped, "failures": scheduler.failures}
