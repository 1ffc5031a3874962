"""Build the ASGI app. The lifespan builds the one `AppState`; nothing lives in module globals."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway.catalog import Catalog, Endpoint, endpoints_from_settings
from gateway.config import Settings
from gateway.http import admin, health, openai_routes
from gateway.http.errors import method_not_allowed, not_found, server_error
from gateway.http.middleware import RequestIdMiddleware
from gateway.pipeline.account import Accountant
from gateway.pipeline.auth import Authenticator
from gateway.pipeline.dispatch import Dispatcher
from gateway.routing.breaker import CircuitBreaker
from gateway.state import AppState
from providers.http import AiohttpClient, HTTPClient, Timeouts

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
) -> AppState:
    catalog = Catalog([*endpoints_from_settings(settings), *extra_endpoints], created=int(time.time()))
    breaker = CircuitBreaker(settings.breaker)
    prices = {ep.id: ep.deployment.price for ep in catalog.endpoints}
    dispatcher = Dispatcher(client, breaker, settings.retry, timeouts_from(settings), clock=clock, rng=rng or random.Random())
    return AppState(
        settings=settings,
        catalog=catalog,
        auth=Authenticator(settings.auth),
        breaker=breaker,
        dispatcher=dispatcher,
        accountant=Accountant(prices.get, clock),
        client=client,
        clock=clock,
        engines=engines,
    )


def create_app(
    settings: Settings,
    *,
    client_factory: Callable[[], HTTPClient] = AiohttpClient,
    extra_endpoints: Sequence[Endpoint] = (),
    engines: Sequence[Any] = (),
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
) -> Starlette:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, AppState]]:
        client = client_factory()  # inside the running loop: aiohttp binds to it
        state = build_state(
            settings, client=client, extra_endpoints=extra_endpoints, engines=engines, clock=clock, rng=rng
        )
        if state.auth.open_access:
            log.warning("no gateway key is configured: the API accepts requests without a key")
        log.info(
            "gateway ready: %d endpoints for %d models", len(state.catalog.endpoints), len(state.catalog.models())
        )
        try:
            yield {"gw": state}
        finally:
            await client.aclose()

    return Starlette(
        routes=[*openai_routes.routes, *health.routes, *admin.routes],
        middleware=[Middleware(RequestIdMiddleware)],
        exception_handlers={404: not_found, 405: method_not_allowed, Exception: server_error},
        lifespan=lifespan,
    )
