"""The probe runner and scheduler, given their collaborators from the app's state: catalog, health,
the shared store (evidence, leases), the database (baselines, runs, transitions), the upstream HTTP
client and the loops' heartbeats."""

from __future__ import annotations

import logging
import time

from gateway.state import AppState
from kernel.clock import Clock
from probes.baselines import BaselineStore, MemoryBaselines
from probes.budget import ProbeBudget
from probes.evidence import EvidenceStore
from probes.fleet import FleetLedger
from probes.registry import ProbeRegistry
from probes.runner import ProbeRunner, make_client_factory
from probes.scheduler import SCHEDULER_LIMIT_S, ProbeScheduler

log = logging.getLogger("gateway.probes")


def build_runner(state: AppState, *, registry: ProbeRegistry | None = None) -> ProbeRunner:
    """The runner for a built `gateway.state.AppState`: its catalog, health, store, database, HTTP client."""
    settings = state.settings.probes
    assert state.shared is not None, "the probes share evidence through the state store"
    wall = state.persistence.wall if state.persistence is not None else time.time
    budget = ProbeBudget(
        requests_per_day=settings.budget_requests_per_day, tokens_per_day=settings.budget_tokens_per_day, clock=wall
    )
    baselines: BaselineStore = MemoryBaselines()
    runs = None
    if state.persistence is not None:
        # Imported here: SQLAlchemy loads only when persistence is on.
        from gateway.persistence.baselines import SqlBaselines
        from gateway.persistence.probe_runs import SqlProbeRuns

        baselines, runs = SqlBaselines(state.persistence.db), SqlProbeRuns(state.persistence)
    return ProbeRunner(
        catalog=state.catalog,
        health=state.health,
        settings=settings,
        registry=registry or ProbeRegistry(),
        evidence=EvidenceStore(state.shared.store),
        baselines=baselines,
        # Probe requests get what routing would add to a user's (its prompt_cache_key), so nothing marks them.
        client_factory=make_client_factory(
            state.client, settings, budget, state.router.extra_for if state.router is not None else None
        ),
        wall=wall,
        persistence=runs,
        metrics=state.metrics,
        # Demotions across the fleet under e-BH at probes.fleet.alpha (n: every endpoint in the catalog).
        fleet=FleetLedger(state.shared.store, settings.fleet, lambda: len(state.catalog.endpoints))
        if settings.fleet.enabled else None,
    )


def build_scheduler(state: AppState, runner: ProbeRunner, *, clock: Clock | None = None) -> ProbeScheduler:
    """The scheduler for a built `gateway.state.AppState`, leasing through its shared state store."""
    assert state.shared is not None
    return ProbeScheduler(
        runner,
        state.settings.probes,
        state.health,
        state.shared.store,
        endpoints=[ep.id for ep in state.catalog.endpoints],
        owner=state.shared.replica,
        clock=clock or runner.wall,
        beat=state.loops.register("probe_scheduler", SCHEDULER_LIMIT_S, log) if getattr(state, "loops", None) else None,
    )
