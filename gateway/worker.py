"""The probe worker: the gateway's state (catalog, health, shared store, database) without the HTTP
server, running only the probe scheduler (`gwctl worker`). Several workers and gateway replicas
may run at once: the scheduler's leases make each scheduled probe run once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.app import build_state  # the same state the gateway builds
from gateway.config import Settings
from gateway.probe_wiring import build_runner, build_scheduler
from providers.clients import client_factory as upstream_client_factory  # the gateway's own client

log = logging.getLogger("gateway.probes")


async def run_worker(
    settings: Settings, *, stop: asyncio.Event, client_factory: Callable[[], Any] | None = None
) -> dict[str, int]:
    """Run the scheduler until `stop` is set; returns its counters (runs, skipped, failures)."""
    client = (client_factory or upstream_client_factory(settings.upstream, settings.providers))()
    state = build_state(settings, client=client)
    assert state.shared is not None
    await state.shared.sync_once()
    state.shared.start()
    if state.persistence is not None:
        await state.persistence.start(state.catalog, state.auth, state.health)
    state.probes = build_runner(state)
    scheduler = build_scheduler(state, state.probes)
    log.info("probe worker: %d scheduled jobs over %d endpoints", len(scheduler.next_run), len(state.catalog.endpoints))
    scheduler.start()
    try:
        await stop.wait()
    finally:
        await scheduler.aclose()
        if state.persistence is not None:
            await state.persistence.aclose()
        await state.shared.aclose()
        await client.aclose()
    return {"runs": scheduler.runs, "skipped": scheduler.skipped, "failures": scheduler.failures}
