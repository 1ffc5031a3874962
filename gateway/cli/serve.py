"""`gwctl serve`: the gateway on uvicorn; its lifespan starts the local engines (if configured) first."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import uvicorn

from gateway.app import create_app
from gateway.cli.quiesce import stop_accepting
from gateway.config import Settings, load_config
from gateway.engines import all_engine_endpoints
from gateway.pipeline.auth import open_bind_problem
from gateway.runtime import drain_timeout
from kernel.redact import install_log_redaction
from kernel.tasks import Deadline, Drain

log = logging.getLogger("gateway")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the gateway (and its local engines)")
    p.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    p.add_argument("--host", help="bind address (overrides server.host)")
    p.add_argument("--port", type=int, help="port (overrides server.port)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    server = settings.server
    if args.host or args.port is not None:
        server = server.model_copy(update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None})
        settings = settings.model_copy(update={"server": server})
    if (problem := open_bind_problem(settings)) is not None:
        print(f"gwctl: {problem}", file=sys.stderr)
        return 2
    if (problem := check_schema(settings)) is not None:  # before logging is set up: one line only
        print(f"gwctl: {problem}", file=sys.stderr)
        return 2
    if (problem := check_engines(settings)) is not None:  # a bad model path, a port in use: one line
        print(f"gwctl: {problem}", file=sys.stderr)
        return 2
    if settings.server.require_auth and not settings.auth.keys and not _stored_keys(settings):
        print("gwctl: server.require_auth is set but auth.keys is empty", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    install_log_redaction()  # URL passwords never reach the log
    # The engines' health checks would log every poll at INFO.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    return _run_loop(serve(settings))


def check_schema(settings: Settings) -> str | None:
    """With persistence on, the database schema must be current: one line saying what to run if not."""
    if not settings.persistence.enabled:
        return None
    from gateway.persistence.schema import schema_problem  # not Alembic: see its docstring

    return schema_problem(settings.database)


def check_engines(settings: Settings) -> str | None:
    """What is certain to stop the engines or the server from starting (see providers.engines.preflight)."""
    from providers.engines.preflight import startup_problem

    return startup_problem(settings)


def _stored_keys(settings: Settings) -> bool:
    if not settings.persistence.enabled:
        return False
    from gateway.persistence.engine import make_engine
    from gateway.persistence.keys import load_keys

    engine = make_engine(settings.database)
    try:
        return load_keys(engine).any_defined
    finally:
        engine.dispose()


def _run_loop(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


async def serve(settings: Settings) -> int:
    # Imported here: the engine package is only needed when engines are configured.
    from providers.engines import EngineSupervisor

    supervisors = []  # started by the app's runtime before it serves, stopped after everything else
    for cfg in settings.engines:
        supervisors.append(EngineSupervisor(cfg, logger=logging.getLogger(f"engine.{cfg.name}")))
        log.info("starting engine %s (%s, %s, %d replica(s))", cfg.name, cfg.kind, cfg.model, cfg.replicas)
    return await _serve_gateway(settings, supervisors)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, starting the shutdown deadline the moment it begins to drain: draining
    in-flight requests and streams, then the lifespan's closing, share one budget.

    The first SIGTERM/SIGINT sets `drain` (/readyz answers 503, responses close their connections)
    and, with a `drain_delay`, keeps accepting for that long before uvicorn's shutdown begins (stop
    accepting, finish in-flight requests and streams); a second signal skips what is left of it."""

    def __init__(self, config: uvicorn.Config, deadline: Deadline, drain: Drain | None = None,
                 drain_delay: float = 0.0) -> None:
        super().__init__(config)
        self.deadline = deadline
        self.drain = drain or Drain()
        self.drain_delay = drain_delay
        self._stop_accepting_at: float | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.drain.active or self.drain_delay <= 0:
            self.drain.begin()
            super().handle_exit(sig, frame)
            return
        self.drain.begin()
        self._stop_accepting_at = time.monotonic() + self.drain_delay
        log.info("draining: /readyz is unready; accepting for %.1f s more, then shutting down", self.drain_delay)

    async def on_tick(self, counter: int) -> bool:
        if self._stop_accepting_at is not None and time.monotonic() >= self._stop_accepting_at:
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.drain.begin()
        self.deadline.start()
        # Nothing accepted is dropped unanswered (see gateway/cli/quiesce.py); at most a second of the budget.
        if not self.force_exit:  # a second signal: no waiting
            await stop_accepting(self.servers, self.server_state.connections, min(1.0, self.deadline.remaining() / 10))
        await super().shutdown(sockets)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def close_when_draining(app: Any, drain: Drain) -> Callable[[Scope, Any, Any], Awaitable[None]]:
    """While draining, every response says `connection: close` (uvicorn then closes it after the
    response): a balancer's pooled connection ends cleanly instead of being cut under a request."""

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not drain.active:
            await app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, closing)

    return wrapped


def server_config(app: Any, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        loop="none",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=settings.server.log_level,
        # In-flight requests and streams drain first, for at most this share of the budget.
        timeout_graceful_shutdown=drain_timeout(settings),  # type: ignore[arg-type]
        proxy_headers=bool(settings.server.forwarded_allow_ips),
        forwarded_allow_ips=list(settings.server.forwarded_allow_ips) or None,
    )


async def _serve_gateway(settings: Settings, supervisors: list[Any]) -> int:
    deadline = Deadline(settings.server.shutdown_timeout_s)
    drain = Drain()
    app = create_app(
        settings,
        extra_endpoints=all_engine_endpoints(settings.engines, supervisors),
        engines=supervisors,
        shutdown=deadline,
        drain=drain,
    )
    config = server_config(close_when_draining(app, drain), settings)
    server = GatewayServer(config, deadline, drain, settings.server.drain_delay_s)
    for name in ("uvicorn", "uvicorn.access"):  # uvicorn's own handlers, set up by its Config
        install_log_redaction(logging.getLogger(name))
    # uvicorn re-raises SIGINT/SIGTERM after its graceful shutdown (the lifespan has stopped the
    # engines by then), with the handlers it found installed; make those no-ops so we return our status.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    # Everything loaded so far (modules, config, SQLAlchemy metadata) lives as long as the process:
    # keep it out of the collector's full passes, which otherwise stall the loop for tens of ms.
    gc.collect()
    gc.freeze()
    try:
        await server.serve()
    except SystemExit:  # uvicorn's word for a lifespan that did not start
        from providers.engines import EngineStartError

        if not isinstance(failure := getattr(app.state, "failure", None), EngineStartError):
            raise
        print(f"gwctl: {failure.message}", file=sys.stderr)  # an engine that did not start: one line
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 2


def _ignore(signum: int, frame: object) -> None:
    pass
