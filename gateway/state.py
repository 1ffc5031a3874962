"""The one state object the app's lifespan builds; handlers reach it as ``request.state.gw``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.admin_limits import FailureLimiter
from gateway.admin_sessions import SessionStore
from gateway.background import Drain, LoopHealth
from gateway.catalog import Catalog
from gateway.config import Settings
from gateway.health_states import HealthStates
from gateway.metrics import GatewayMetrics

if TYPE_CHECKING:  # imported lazily: SQLAlchemy only loads when persistence is on
    from gateway.persistence.runtime import Persistence
    from probes.toolcalls.passive import ToolCallMonitor
from gateway.pipeline.account import Accountant
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.dispatch import Dispatcher
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.router import Router
from gateway.routing.shared import SharedState
from providers.http import HTTPClient


@dataclass
class AppState:
    settings: Settings
    catalog: Catalog
    auth: Authenticator
    breaker: CircuitBreaker
    dispatcher: Dispatcher
    accountant: Accountant
    client: HTTPClient
    clock: Callable[[], float]
    # Supervised local engines (providers.engines.EngineSupervisor), already started.
    engines: Sequence[Any] = field(default_factory=tuple)
    # Endpoint health states (probes and operators set them; routing reads them).
    health: HealthStates = field(default_factory=HealthStates)
    metrics: GatewayMetrics | None = None  # settings.metrics.enabled
    persistence: Persistence | None = None  # settings.persistence.enabled
    # Routing (filters, policy, feedback) over state shared with other replicas through the store.
    router: Router | None = None
    shared: SharedState | None = None
    # Dashboard sign-in sessions (gateway.http.dashboard); the admin guard accepts them.
    sessions: SessionStore = field(default_factory=SessionStore)
    # Failed admin sign-ins and admin bearer checks per client address (gateway.http.admin).
    admin_failures: FailureLimiter = field(default_factory=lambda: FailureLimiter(10))
    # The probe runner (probes.runner.ProbeRunner): on-demand audits and the scheduler use it.
    probes: Any = None
    # Passive tool-call validation of live responses (counts per endpoint; an alarm starts the suite).
    tool_monitor: ToolCallMonitor | None = None
    # Per-key and per-team limits and budgets (gateway.limits.Limiter): a stage and an observer.
    limits: Any = None
    # The background loops' heartbeats (/readyz, /metrics).
    loops: LoopHealth = field(default_factory=LoopHealth)
    # Set on SIGTERM (`gwctl serve`): /readyz turns unready first.
    drain: Drain = field(default_factory=Drain)
