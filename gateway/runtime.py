"""The one composition root: `build_state` builds every collaborator (no I/O), each given what it
needs at construction; `Runtime` starts them in dependency order and closes them in reverse, within
one shutdown budget. The app's lifespan, `gwctl worker` and the tests all go through it.

Start: local engines → upstream client → state (`build_state`) → the shared view (first sync,
then its loop) → persistence → probe scheduler. Close, in reverse: scheduler → tool-call monitor →
persistence → the state store's last push → limits → the traces' last export → upstream client →
engines. A new collaborator is built in `build_state`; if it runs or holds something, start it in
`Runtime._start` and push its close right after (`_close`), where it belongs in that order."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import Any, Protocol

from gateway.admin_limits import FailureLimiter
from gateway.admin_sessions import SessionStore
from gateway.catalog import Catalog, Endpoint, endpoints_from_settings
from gateway.config import Settings
from gateway.health_states import DATABASE_SINK, STORE_SINK, HealthStates, TransitionSink
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
from kernel.tasks import Deadline, Drain, LoopHealth, cancel_and_wait
from probes.scheduler import ProbeScheduler
from probes.toolcalls.checker import ProcessChecker
from probes.toolcalls.passive import SOURCE as TOOL_MONITOR
from probes.toolcalls.passive import ToolCallMonitor
from providers.clients import client_factory as upstream_client_factory
from providers.engines.errors import EngineStartError
from providers.http import HTTPClient, Timeouts

log = logging.getLogger("gateway")


class Engine(Protocol):
    """A supervised local engine (`providers.engines.EngineSupervisor`)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


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
    span_exporter: Any = None,
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
        build_metrics(catalog, breaker, health_states, clock, persistence, loops=loops)
        if settings.metrics.enabled
        else None
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
    # Key limits and budgets are the limits stage's (gateway.limits), routing.keys' rpm/tpm included.
    limiter = build_limiter(settings, prices.get, store=limit_store, regions={ep.region for ep in catalog.endpoints})
    router = Router(
        settings.routing,
        catalog,
        shared,
        clock=clock,
        rng=random.Random(rng.random()) if rng else None,
        admit_keys=False,
        key_policies=limiter.key_policy,  # keys' and teams' regions and data policy
    )
    tracing = None
    if settings.tracing.enabled:  # the OpenTelemetry SDK (the `otel` extra) loads only then
        from gateway.tracing.wiring import build_tracing

        tracing = build_tracing(settings.tracing, clock=clock, exporter=span_exporter)
    # On-demand audits, the scheduler and the tool-call monitor's confirmations run the probes.
    probes = build_runner(
        settings.probes,
        catalog=catalog,
        health=health_states,
        store=store,
        client=client,
        persistence=persistence,
        metrics=metrics,
        shape=router.extra_for,
        headers=tracing.observer.probe_headers if tracing else None,
    )
    tool_monitor = ToolCallMonitor(
        health_states,
        settings.probes.health,
        wall=persistence.wall if persistence else time.time,
        monitor=settings.probes.tool_monitor,
        checker=ProcessChecker(settings.probes.tool_monitor),
        count=metrics.tool_call_results if metrics else None,
        # A passive alarm may only start the gateway's own suite.
        confirm=partial(probes.run, probes=["toolcalls"], trigger=TOOL_MONITOR),
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
            *([tracing.observer] if tracing else []),
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
        probes=probes,
        tool_monitor=tool_monitor,
        responses=ResponseStore(
            store,
            ttl_s=settings.responses.ttl_s,
            max_bytes=settings.responses.max_stored_bytes,
            archive=persistence.responses if persistence is not None and settings.responses.durable else None,
        ),
        limits=limiter,
        tracing=tracing,
        loops=loops,
        sessions=SessionStore(idle=settings.auth.session_idle_timeout_s),
        admin_failures=FailureLimiter(settings.auth.admin_failures_per_minute),
        drain=drain or Drain(),
    )


# Of `server.shutdown_timeout_s`: what uvicorn may spend draining in-flight requests and streams
# (first), what closing the background work may take after it, and what stopping local engines takes.
DRAIN_SHARE = 0.5
ENGINE_STOP_RESERVE_S = 5.0
# How often an engine's start looks whether a signal (the drain) asked the process to stop.
SIGNAL_CHECK_S = 0.1


def drain_timeout(settings: Settings) -> float:
    return settings.server.shutdown_timeout_s * DRAIN_SHARE


def closing_budget(settings: Settings) -> float:
    """The runtime's share when no server started the deadline (in-process tests, embedding, the worker)."""
    return settings.server.shutdown_timeout_s - drain_timeout(settings)


async def stop_engines(engines: Sequence[Engine]) -> None:
    # Together, not one after another: each has its own grace period (the budget's engine share).
    await asyncio.gather(*(engine.stop() for engine in reversed(engines)), return_exceptions=True)


class Runtime:
    """`async with Runtime(settings, ...) as runtime:` everything started, `runtime.state` ready to
    serve; leaving it closes everything, each step bounded by what is left of `shutdown` (the
    server's deadline; without one, `closing_budget`) less what the steps after it need, an overrun
    cut short and logged. A failed start closes what had started.

    `engines`: local engines, not yet started (their endpoints are in `extra_endpoints`); started
    first, stopped last. `scheduler`: run the probe scheduler (default: `probes.enabled`)."""

    state: AppState
    scheduler: ProbeScheduler | None = None

    def __init__(
        self,
        settings: Settings,
        *,
        client_factory: Callable[[], HTTPClient] | None = None,
        extra_endpoints: Sequence[Endpoint] = (),
        engines: Sequence[Engine] = (),
        clock: Callable[[], float] = time.perf_counter,
        rng: random.Random | None = None,
        store: StateStore | None = None,
        drain: Drain | None = None,
        limit_store: LimitStore | None = None,
        shutdown: Deadline | None = None,
        scheduler: bool | None = None,
        span_exporter: Any = None,
    ) -> None:
        self.settings = settings
        self._make_client = client_factory or upstream_client_factory(settings.upstream, settings.providers)
        self.drain = drain or Drain()
        self._build = partial(
            build_state,
            settings,
            extra_endpoints=extra_endpoints,
            engines=engines,
            clock=clock,
            rng=rng,
            store=store,
            drain=self.drain,
            limit_store=limit_store,
            span_exporter=span_exporter,
        )
        self.engines = engines
        self.deadline = shutdown or Deadline(closing_budget(settings))
        self._run_scheduler = settings.probes.enabled if scheduler is None else scheduler
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Runtime:
        async with AsyncExitStack() as stack:
            await self._start(stack)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()

    def _close(
        self, stack: AsyncExitStack, what: str, close: Callable[[], Awaitable[object]], *, reserve: float
    ) -> None:
        stack.push_async_callback(lambda: self.deadline.run(close(), what, reserve=reserve))

    async def _start_engine(self, engine: Engine) -> None:
        """A signal while a model loads (uvicorn only sets the drain then) abandons the start."""
        starting = asyncio.ensure_future(engine.start())
        while not starting.done():
            await asyncio.wait({starting}, timeout=SIGNAL_CHECK_S)
            if self.drain.active and not starting.done():
                await cancel_and_wait(starting)
                raise EngineStartError("told to stop while the local engines were starting")
        starting.result()

    async def _start(self, stack: AsyncExitStack) -> None:
        # What the steps closed after each one need of the budget: the engines' stop, the last push.
        engine_stop = ENGINE_STOP_RESERVE_S if self.engines else 0.0
        last_push = min(self.settings.state_store.timeout_s * 8, 2.0)
        later = engine_stop + last_push + 0.5
        remaining = self.deadline.remaining

        stack.push_async_callback(stop_engines, self.engines)  # a partly started engine stops too
        for engine in self.engines:
            await self._start_engine(engine)
        client = self._make_client()  # inside the running loop: the client binds to it
        self._close(stack, "the upstream client", client.aclose, reserve=engine_stop)
        self.state = state = self._build(client=client)
        if state.tracing is not None:  # its exporter thread runs from the build on (a failed start too)
            self._close(stack, "the traces' export", state.tracing.aclose, reserve=engine_stop)
        if state.limits is not None:  # settlements in flight
            self._close(stack, "the limits' settlements", state.limits.aclose, reserve=engine_stop)
        shared = state.shared
        assert shared is not None
        await shared.sync_once()  # the shared view before the first request
        shared.start()
        self._close(
            stack,
            "the state store's last push",
            lambda: shared.aclose(timeout=max(0.0, min(last_push, remaining() - engine_stop - 0.5))),
            reserve=engine_stop,
        )
        if (persistence := state.persistence) is not None:
            await persistence.start(state.catalog, state.auth, state.health, limits=state.limits)
            # Flushes the record queue, spills what the database does not take.
            self._close(
                stack,
                "persistence",
                lambda: persistence.aclose(timeout=max(0.0, remaining() - later)),
                reserve=later - 0.5,
            )
        if state.tool_monitor is not None:  # checks and confirmation runs in flight, and its worker
            self._close(stack, "the tool-call monitor", state.tool_monitor.aclose, reserve=later)
        if self._run_scheduler:
            assert state.probes is not None
            self.scheduler = scheduler = build_scheduler(state, state.probes)
            scheduler.start()
            self._close(stack, "the probe scheduler", scheduler.aclose, reserve=later)
