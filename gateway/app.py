"""Build the ASGI app. The lifespan builds the one `AppState`; nothing lives in module globals."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway.admin_limits import FailureLimiter
from gateway.admin_sessions import SessionStore
from gateway.catalog import Catalog, Endpoint, endpoints_from_settings
from gateway.config import Settings
from gateway.health_states import DATABASE_SINK, STORE_SINK, HealthStates, TransitionSink
from gateway.http import (
    admin,
    admin_api,
    admin_keys,
    admin_probes,
    dashboard,
    health,
    messages_routes,
    openai_routes,
    responses_routes,
    route_admin,
)
from gateway.http import metrics as metrics_route
from gateway.http.errors import method_not_allowed, not_found, server_error
from gateway.http.fast import GatewayApp
from gateway.http.middleware import RequestIdMiddleware
from gateway.limits.store import LimitStore
from gateway.limits.wiring import build_limiter
from gateway.metrics import build_metrics
from gateway.pipeline.account import Accountant
from gateway.pipeline.auth import Authenticator, open_by_config
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.observe import Observers
from gateway.probe_wiring import build_runner, build_scheduler
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.breaker_feedback import BreakerFeedback
from gateway.routing.health_feed import HealthFeed
from gateway.routing.router import Router
from gateway.routing.shared import SharedState, sync_limit_s
from gateway.state import AppState
from gateway.state_store import StateStore, open_store
from gateway.state_store.responses import ResponseStore
from kernel.tasks import Deadline, Drain, LoopHealth
from probes.toolcalls.checker import ProcessChecker
from probes.toolcalls.passive import SOURCE as TOOL_MONITOR
from probes.toolcalls.passive import ToolCallMonitor
from providers.clients import client_factory as upstream_client_factory
from providers.http import HTTPClient, Timeouts

log = logging.getLogger("gateway")


def timeouts_from(settings: Settings) -> Timeouts:
    t = settings.timeouts
    return Timeouts(connect=t.connect, first_byte=t.first_byte, between_chunks=t.between_chunks, total=t.total)


def build_state(
    settings: Settings,
    *,
    client: HTTPClient,
    extra_endpoints: Sequence[Endpoint] = (),
    engines: Sequence[Any] = (),
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
    store: StateStore | None = None,
    drain: Drain | None = None,
    limit_store: LimitStore | None = None,
) -> AppState:
    catalog = Catalog([*endpoints_from_settings(settings), *extra_endpoints], created=int(time.time()))
    breaker = CircuitBreaker(settings.breaker, max_block_s=settings.retry.max_retry_after_block)
    prices = {ep.id: ep.deployment.price for ep in catalog.endpoints}
    loops = LoopHealth()
    persistence = None
    if settings.persistence.enabled:
        from gateway.persistence.runtime import Persistence  # keeps SQLAlchemy out of start-up when off

        persistence = Persistence(settings, loops=loops)
    store = store or open_store(settings.state_store)
    # The one write path of health: published through the state store (every replica adopts it at
    # its next sync), and stored in the database when there is one.
    health_feed = HealthFeed(store)
    health_sinks: dict[str, TransitionSink] = {STORE_SINK: health_feed}
    if persistence is not None:
        health_sinks[DATABASE_SINK] = persistence.record_transition
    health_states = HealthStates(health_sinks)
    metrics = (
        build_metrics(catalog, breaker, health_states, clock, persistence, loops=loops) if settings.metrics.enabled else None
    )
    keep_bodies = settings.persistence.enabled and settings.persistence.store_bodies
    sync_beat = loops.register("state_sync", sync_limit_s(settings.state_store), logging.getLogger("gateway.state"))
    shared = SharedState(
        settings.routing,
        settings.state_store,
        catalog,
        store,
        breaker,
        health=health_states,
        health_feed=health_feed,
        clock=clock,
        beat=sync_beat,
    )
    router = Router(settings.routing, catalog, shared, clock=clock, rng=random.Random(rng.random()) if rng else None)
    # Key limits and budgets are the limits stage's (gateway.limits), routing.keys' rpm/tpm included.
    limiter = build_limiter(settings, prices.get, store=limit_store, regions={ep.region for ep in catalog.endpoints})
    router.admit_keys = False
    router.key_policies = limiter.key_policy  # keys' and teams' regions and data policy
    tool_monitor = ToolCallMonitor(
        health_states,
        settings.probes.health,
        wall=persistence.wall if persistence else time.time,
        monitor=settings.probes.tool_monitor,
        checker=ProcessChecker(settings.probes.tool_monitor),
        count=metrics.tool_call_results if metrics else None,
    )
    # The one way back from a request: every party that learns from it, as peers, in this order.
    feedback = Observers(
        [
            BreakerFeedback(breaker),
            router,
            tool_monitor,
            limiter,
            *([metrics.sink] if metrics else []),
            *([persistence.queue] if persistence else []),
        ]
    )
    dispatcher = Dispatcher(
        client, settings.retry, timeouts_from(settings), clock=clock, rng=rng or random.Random(), observer=feedback
    )
    return AppState(
        settings=settings,
        catalog=catalog,
        auth=Authenticator(
            settings.auth,
            open_access=open_by_config(settings),
            stored=settings.persistence.enabled,
            expiry=limiter.check_expiry,
        ),
        breaker=breaker,
        dispatcher=dispatcher,
        accountant=Accountant(prices.get, clock, feedback, keep_bodies=keep_bodies),
        feedback=feedback,
        client=client,
        clock=clock,
        engines=engines,
        health=health_states,
        metrics=metrics,
        persistence=persistence,
        router=router,
        shared=shared,
        tool_monitor=tool_monitor,
        responses=ResponseStore(
            store,
            ttl_s=settings.responses.ttl_s,
            max_bytes=settings.responses.max_stored_bytes,
            archive=persistence.responses if persistence is not None and settings.responses.durable else None,
        ),
        limits=limiter,
        loops=loops,
        sessions=SessionStore(idle=settings.auth.session_idle_timeout_s),
        admin_failures=FailureLimiter(settings.auth.admin_failures_per_minute),
        drain=drain or Drain(),
    )


# Of `server.shutdown_timeout_s`: what uvicorn may spend draining in-flight requests and streams
# (first), what closing the background work may take after it, and what stopping local engines takes.
DRAIN_SHARE = 0.5
ENGINE_STOP_RESERVE_S = 5.0


def drain_timeout(settings: Settings) -> float:
    return settings.server.shutdown_timeout_s * DRAIN_SHARE


def closing_budget(settings: Settings) -> float:
    """The lifespan's share when no server started the deadline (in-process tests, embedding)."""
    return settings.server.shutdown_timeout_s - drain_timeout(settings)


async def close_within(state: AppState, scheduler: Any, client: HTTPClient, deadline: Deadline, engines: bool) -> None:
    """Close the background work in order, each step bounded by what is left of the one shutdown
    budget (keeping enough for the steps after it); a step that overruns is cut short and logged."""
    settings = state.settings
    engine_stop = ENGINE_STOP_RESERVE_S if engines else 0.0
    last_push = min(settings.state_store.timeout_s * 8, 2.0)
    later = engine_stop + last_push + 0.5
    if scheduler is not None:
        await deadline.run(scheduler.aclose(), "the probe scheduler", reserve=later)
    if state.tool_monitor is not None:  # checks and confirmation runs in flight, and its worker
        await deadline.run(state.tool_monitor.aclose(), "the tool-call monitor", reserve=later)
    if state.persistence is not None:  # flushes the record queue, spills what the database does not take
        await deadline.run(
            state.persistence.aclose(timeout=max(0.0, deadline.remaining() - later)), "persistence", reserve=later - 0.5
        )
    assert state.shared is not None
    await deadline.run(
        state.shared.aclose(timeout=max(0.0, min(last_push, deadline.remaining() - engine_stop - 0.5))),
        "the state store's last push",
        reserve=engine_stop,
    )
    if state.limits is not None:  # settlements in flight
        await deadline.run(state.limits.aclose(), "the limits' settlements", reserve=engine_stop)
    await deadline.run(client.aclose(), "the upstream client", reserve=engine_stop)


def create_app(
    settings: Settings,
    *,
    client_factory: Callable[[], HTTPClient] | None = None,
    extra_endpoints: Sequence[Endpoint] = (),
    engines: Sequence[Any] = (),
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
    store: StateStore | None = None,
    shutdown: Deadline | None = None,
    drain: Drain | None = None,
    limit_store: LimitStore | None = None,
) -> Starlette:
    """`shutdown`: the server's shutdown deadline (`gwctl serve` starts it when uvicorn begins to
    drain); without one the lifespan closes within `closing_budget`. `drain`: set by the server on
    SIGTERM (/readyz then answers 503)."""
    make_client = client_factory or upstream_client_factory(settings.upstream, settings.providers)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, AppState]]:
        client = make_client()  # inside the running loop: the client binds to it
        state = build_state(
            settings, client=client, extra_endpoints=extra_endpoints, engines=engines, clock=clock, rng=rng, store=store,
            drain=drain,
            limit_store=limit_store,
        )
        assert state.shared is not None
        await state.shared.sync_once()  # the shared view before the first request
        state.shared.start()
        if state.persistence is not None:
            await state.persistence.start(state.catalog, state.auth, state.health, limits=state.limits)
        if state.auth.open_access:
            log.warning("auth is open (auth.open, or no key configured): the API accepts requests without a key")
        state.probes = build_runner(state)
        if state.tool_monitor is not None:  # a passive alarm may only start the gateway's own suite
            state.tool_monitor.confirm = partial(state.probes.run, probes=["toolcalls"], trigger=TOOL_MONITOR)
        scheduler = build_scheduler(state, state.probes) if settings.probes.enabled else None
        if scheduler is not None:
            scheduler.start()
        log.info(
            "gateway ready: %d endpoints for %d models", len(state.catalog.endpoints), len(state.catalog.models())
        )
        try:
            yield {"gw": state}
        finally:
            await close_within(state, scheduler, client, shutdown or Deadline(closing_budget(settings)), bool(engines))

    return GatewayApp(
        fast_routes={**openai_routes.fast_routes, **messages_routes.fast_routes, **responses_routes.fast_routes},
        routes=[
            *openai_routes.routes, *messages_routes.routes, *responses_routes.routes, *health.routes, *admin.routes,
            *admin_api.routes, *admin_keys.routes, *admin_probes.routes, *metrics_route.routes, *route_admin.routes,
            *dashboard.routes,
        ],
        middleware=[Middleware(RequestIdMiddleware), Middleware(admin.NoStoreMiddleware)],
        exception_handlers={404: not_found, 405: method_not_allowed, Exception: server_error},
        lifespan=lifespan,
    )
