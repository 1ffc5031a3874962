"""The one state object (`gateway.runtime.build_state` builds it); handlers reach it as ``request.state.gw``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.admin_limits import FailureLimiter
from gateway.admin_sessions import SessionStore
from gateway.catalog import Catalog
from gateway.config import Settings
from gateway.health_states import HealthStates
from gateway.limits.stage import Limiter
from gateway.metrics import GatewayMetrics
from gateway.pipeline.account import Accountant
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.observe import Observers
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.router import Router
from gateway.routing.shared import SharedState
from gateway.state_store.responses import ResponseStore
from kernel.clock import Clock
from kernel.tasks import Drain, LoopHealth
from providers.http import HTTPClient

if TYPE_CHECKING:  # imported lazily: SQLAlchemy only loads when persistence is on
    from gateway.persistence.runtime import Persistence
    from gateway.tracing.wiring import Tracing
    from probes.runner import ProbeRunner
    from probes.toolcalls.passive import ToolCallMonitor


@dataclass
class AppState:
    settings: Settings
    catalog: Catalog
    auth: Authenticator
    breaker: CircuitBreaker
    dispatcher: Dispatcher
    accountant: Accountant
    client: HTTPClient
    clock: Clock  # monotonic (perf_counter): request timings
    # Supervised local engines (providers.engines.EngineSupervisor), started and stopped by the runtime.
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
    # The probe runner: on-demand audits, the scheduler and the tool-call monitor use it.
    probes: ProbeRunner | None = None
    # Passive tool-call validation of live responses (counts per endpoint; an alarm starts the suite).
    tool_monitor: ToolCallMonitor | None = None
    # Stored Responses API responses (`store: true`), in the state store: shared when it is.
    responses: ResponseStore | None = None
    # Per-key and per-team limits and budgets: a stage before dispatch and a request observer.
    limits: Limiter | None = None
    # OpenTelemetry traces (settings.tracing.enabled): the provider the lifespan closes.
    tracing: Tracing | None = None
    # The background loops' heartbeats (/readyz, /metrics).
    loops: LoopHealth = field(default_factory=LoopHealth)
    # Every party that learns from requests (`gateway.pipeline.observe`): the stream stage tells it
    # when a committed stream breaks.
    feedback: Observers = field(default_factory=Observers)
    # Set on SIGTERM (`gwctl serve`): /readyz turns unready first.
    drain: Drain = field(default_factory=Drain)
