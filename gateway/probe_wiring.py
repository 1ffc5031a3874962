"""The probe runner and scheduler, given their collaborators: catalog, health, the shared store
(evidence, leases), the database (baselines, runs, transitions), the upstream HTTP client and the
loops' heartbeats."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gateway.catalog import Catalog
from gateway.health_states import HealthStates
from gateway.metrics import GatewayMetrics
from gateway.state import AppState
from gateway.state_store import StateStore
from kernel.clock import Clock
from probes.baselines import BaselineStore, MemoryBaselines
from probes.budget import ProbeBudget
from probes.client import UserHeaders, UserShape
from probes.evidence import EvidenceStore
from probes.fleet import FleetLedger
from probes.registry import ProbeRegistry
from probes.runner import ProbeRunner, make_client_factory
from probes.scheduler import ProbeScheduler, scheduler_limit_s
from probes.settings import ProbeSettings
from providers.http import HTTPClient

if TYPE_CHECKING:  # SQLAlchemy loads only when persistence is on
    from gateway.persistence.runtime import Persistence

log = logging.getLogger("gateway.probes")


def build_runner(
    settings: ProbeSettings,
    *,
    catalog: Catalog,
    health: HealthStates,
    store: StateStore,
    client: HTTPClient,
    persistence: Persistence | None = None,
    metrics: GatewayMetrics | None = None,
    shape: UserShape | None = None,
    headers: UserHeaders | None = None,
    registry: ProbeRegistry | None = None,
) -> ProbeRunner:
    """`store`: where the probes share evidence; `shape` and `headers`: what routing adds to a user's
    request (its prompt_cache_key) and what tracing adds to its headers, so nothing marks a probe's."""
    wall = persistence.wall if persistence is not None else time.time
    budget = ProbeBudget(
        requests_per_day=settings.budget_requests_per_day, tokens_per_day=settings.budget_tokens_per_day, clock=wall
    )
    baselines: BaselineStore = MemoryBaselines()
    runs = None
    if persistence is not None:
        # Imported here: SQLAlchemy loads only when persistence is on.
        from gateway.persistence.baselines import SqlBaselines
        from gateway.persistence.probe_runs import SqlProbeRuns

        baselines, runs = SqlBaselines(persistence.db), SqlProbeRuns(persistence)
    return ProbeRunner(
        catalog=catalog,
        health=health,
        settings=settings,
        registry=registry or ProbeRegistry(),
        evidence=EvidenceStore(store),
        baselines=baselines,
        client_factory=make_client_factory(client, settings, budget, shape, headers),
        wall=wall,
        persistence=runs,
        metrics=metrics,
        # Demotions across the fleet under e-BH at probes.fleet.alpha (n: every endpoint in the catalog).
        fleet=FleetLedger(store, settings.fleet, lambda: len(catalog.endpoints)) if settings.fleet.enabled else None,
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
        beat=state.loops.register("probe_scheduler", scheduler_limit_s(state.settings.probes), log) if getattr(state, "loops", None) else None,
    )
