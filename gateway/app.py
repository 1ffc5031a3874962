"""Build the ASGI app. Its lifespan runs the one `gateway.runtime.Runtime`; nothing lives in module globals."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway.catalog import Endpoint
from gateway.config import Settings
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
from gateway.http.errors import gateway_error, method_not_allowed, not_found, server_error
from gateway.http.fast import GatewayApp
from gateway.http.middleware import RequestIdMiddleware
from gateway.limits.store import LimitStore
from gateway.runtime import Engine, Runtime
from gateway.state import AppState
from gateway.state_store import StateStore
from kernel.errors import GatewayError
from kernel.tasks import Deadline, Drain
from providers.http import HTTPClient

log = logging.getLogger("gateway")


def create_app(
    settings: Settings,
    *,
    client_factory: Callable[[], HTTPClient] | None = None,
    extra_endpoints: Sequence[Endpoint] = (),
    engines: Sequence[Engine] = (),
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
    store: StateStore | None = None,
    shutdown: Deadline | None = None,
    drain: Drain | None = None,
    limit_store: LimitStore | None = None,
    span_exporter: Any = None,
) -> Starlette:
    """The lifespan runs a `gateway.runtime.Runtime`. `engines`: local engines it starts first and
    stops last (their endpoints in `extra_endpoints`). `shutdown`: the server's shutdown deadline
    (`gwctl serve` starts it when uvicorn begins to drain); without one the lifespan closes within
    `closing_budget`. `drain`: set by the server on SIGTERM (/readyz then answers 503). `span_exporter`: where spans go
    instead of OTLP (tests)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, AppState]]:
        runtime = Runtime(
            settings, client_factory=client_factory, extra_endpoints=extra_endpoints, engines=engines, clock=clock,
            rng=rng, store=store, drain=drain, limit_store=limit_store, shutdown=shutdown,
            span_exporter=span_exporter,
        )
        try:
            async with runtime:
                if runtime.state.auth.open_access:
                    log.warning("auth is open (auth.open, or no key configured): the API accepts requests without a key")
                catalog = runtime.state.catalog
                log.info("gateway ready: %d endpoints for %d models", len(catalog.endpoints), len(catalog.models()))
                yield {"gw": runtime.state}
        except Exception as exc:
            app.state.failure = exc  # a failed start: `gwctl serve` says why in one line
            raise

    return GatewayApp(
        fast_routes={**openai_routes.fast_routes, **messages_routes.fast_routes, **responses_routes.fast_routes},
        routes=[
            *openai_routes.routes, *messages_routes.routes, *responses_routes.routes, *health.routes, *admin.routes,
            *admin_api.routes, *admin_keys.routes, *admin_probes.routes, *metrics_route.routes, *route_admin.routes,
            *dashboard.routes,
        ],
        middleware=[Middleware(RequestIdMiddleware), Middleware(admin.NoStoreMiddleware)],
        exception_handlers={GatewayError: gateway_error, 404: not_found, 405: method_not_allowed, Exception: server_error},
        lifespan=lifespan,
    )
