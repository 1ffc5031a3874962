"""`gwctl serve`: start the local engines (if configured), then the gateway on uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

import uvicorn

from gateway.app import create_app
from gateway.config import Settings, load_config

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
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if settings.server.require_auth and not settings.auth.keys:
        print("gwctl: server.require_auth is set but auth.keys is empty", file=sys.stderr)
        return 2
    return _run_loop(serve(settings))


def _run_loop(coro: Any) -> int:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.run(coro)


async def serve(settings: Settings) -> int:
    config = uvicorn.Config(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        loop="none",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=settings.server.log_level,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    await server.serve()
    return 0 if server.started else 2
