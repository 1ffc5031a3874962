"""Probe runs in the database: `probes.runner.ProbeRunStore` over `gateway.persistence.probes`'
plain functions, each run off the event loop, and the transitions through `Persistence`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.persistence import probes as repo
from gateway.persistence.runtime import Persistence
from kernel.health import Transition
from probes.base import ProbeResult


class SqlProbeRuns:
    def __init__(self, persistence: Persistence) -> None:
        self._persistence = persistence

    async def start_run(self, endpoint_id: str, suite: str, *, at: float, trigger: str) -> int:
        return await self._persistence.db.run(repo.start_run, endpoint_id, suite, at=at, trigger=trigger)

    async def add_results(self, run_id: int, results: Sequence[ProbeResult], *, at: float) -> None:
        await self._persistence.db.run(repo.add_results, run_id, results, at=at)

    async def finish_run(
        self, run_id: int, verdict: str, *, at: float, tokens_spent: int, details: Mapping[str, Any]
    ) -> None:
        await self._persistence.db.run(
            repo.finish_run, run_id, verdict, at=at, tokens_spent=tokens_spent, details=details
        )

    async def record_transition(self, t: Transition) -> object:
        return await self._persistence.record_transition(t)
