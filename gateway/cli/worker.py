"""`gwctl worker`: run the probe scheduler as its own process, without serving HTTP.

    gwctl worker --config gateway.yaml

Runs the same runtime as `gwctl serve` (`gateway.runtime`: catalog, health states, shared store,
database) and the scheduled probes until SIGINT/SIGTERM. Use it instead of `probes.enabled` in the gateways.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from gateway.config import load_config
from gateway.worker import run_worker
from kernel.redact import install_log_redaction


def add_parser(sub: Any) -> None:
    p = sub.add_parser("worker", help="run the probe scheduler without serving HTTP")
    p.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    p.set_defaults(run=run)


async def _main(settings: Any) -> dict[str, int]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await run_worker(settings, stop=stop)


def run(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    from gateway.cli.serve import check_schema

    if (problem := check_schema(settings)) is not None:
        print(f"gwctl: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    install_log_redaction()  # URL passwords never reach the log
    counts = asyncio.run(_main(settings))
    print(f"gwctl worker: stopped after {counts['runs']} runs ({counts['skipped']} left to other replicas, "
          f"{counts['failures']} failed)", file=sys.stderr)
    return 0
