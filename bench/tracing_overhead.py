"""What tracing adds to a request: the same gateway with tracing off, on (every trace recorded and
exported over OTLP/HTTP), and on with `sample_ratio: 0` (spans not recorded, traceparent still sent).

    .venv/bin/python bench/tracing_overhead.py                 # about 30 s
    .venv/bin/python bench/tracing_overhead.py --requests 3000 --json out.json

Paired A/B in process, as persistence_overhead.py's `inprocess` mode (bench/_inprocess.py): the
apps run in one event loop, each with its lifespan, over an in-process fake upstream; requests go
to them in turn, one at a time, straight through ASGI, so load from other processes falls on every
variant alike. The traced apps export with the real OTLP/HTTP exporter and batch processor (in its
thread, during the run) to the fake collector (tests/fakes/otlp_collector.py) in a child process.
Then each variant alone: the process CPU per request (the exporter thread's included, its last
batch flushed), and at the end the spans the collector received against those expected.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from _inprocess import KEY, call, upstream

from gateway.app import create_app
from gateway.config import Settings, load_config
from providers.http_mock import MockHTTPClient

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"off": None, "on": 1.0, "sampled_out": 0.0}


def settings_for(ratio: float | None, collector: str) -> Settings:
    config: dict[str, Any] = {
        "auth": {"keys": [{"name": "bench", "key": KEY}]},
        "providers": [{"name": "mock", "base_url": "http://mock.test/v1"}],
        "deployments": [{"model": "mock-model", "provider": "mock", "price": {"input": 0.1, "output": 0.4}}],
    }
    if ratio is not None:
        config["tracing"] = {"enabled": True, "endpoint": collector, "sample_ratio": ratio}
    return load_config(environ={}, **config)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    app = create_app(settings, client_factory=lambda: MockHTTPClient(upstream))
    async with app.router.lifespan_context(app) as state:
        yield app, dict(state or {})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def collector_count(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_spans", timeout=10) as resp:
        return dict(json.loads(resp.read()))


def start_collector(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.otlp_collector", "--port", str(port)], cwd=ROOT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            collector_count(port)
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the fake collector did not start")


def flush(state: dict[str, Any]) -> None:
    tracing = state["gw"].tracing
    if tracing is not None:
        assert tracing.provider.force_flush(30_000), "the export did not finish"


async def measure(requests: int, warmup: int, cpu_requests: int, port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/v1/traces"
    async with AsyncExitStack() as stack:
        apps = {v: await stack.enter_async_context(running(settings_for(r, url))) for v, r in VARIANTS.items()}
        samples: dict[str, list[float]] = {v: [] for v in apps}
        errors = 0
        names = list(apps)
        for i in range(warmup + requests):
            for v in names if i % 2 == 0 else names[::-1]:
                app, state = apps[v]
                status, took = await call(app, state, i)
                errors += status != 200
                if i >= warmup:
                    samples[v].append(took)
            if i % 50 == 0:
                await asyncio.sleep(0)
        cpu_us: dict[str, float] = {}
        for v, (app, state) in apps.items():
            flush(state)
            start = time.process_time()
            for i in range(cpu_requests):
                status, _ = await call(app, state, i)
                errors += status != 200
            flush(state)  # the exporter's work for these requests is counted too
            cpu_us[v] = (time.process_time() - start) / cpu_requests * 1e6
    p50 = {v: statistics.median(s) * 1000 for v, s in samples.items()}
    p99 = {v: sorted(s)[int(len(s) * 0.99) - 1] * 1000 for v, s in samples.items()}
    traced = warmup + requests + cpu_requests
    return {
        "requests_per_variant": requests,
        "errors": errors,
        "p50_ms": p50,
        "p99_ms": p99,
        "added_p50_ms": {v: p50[v] - p50["off"] for v in apps if v != "off"},
        "cpu_us_per_request": cpu_us,
        "added_cpu_us_per_request": {v: cpu_us[v] - cpu_us["off"] for v in apps if v != "off"},
        "spans_expected": 2 * traced,  # the "on" app's: a request span and an attempt span each
        "collector": collector_count(port),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--cpu-requests", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    port = free_port()
    collector = start_collector(port)
    try:
        result = asyncio.run(measure(args.requests, args.warmup, args.cpu_requests, port))
    finally:
        collector.terminate()
        collector.wait(10)
    print(f"{'variant':<12} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'CPU us/req':>11}")
    for v in VARIANTS:
        added = result["added_p50_ms"].get(v)
        print(
            f"{v:<12} {result['p50_ms'][v]:>8.3f} {result['p99_ms'][v]:>8.3f} "
            f"{'' if added is None else f'{added:+.3f}':>10} {result['cpu_us_per_request'][v]:>11.1f}"
        )
    got = result["collector"]["spans"]
    print(f"spans at the collector: {got} of {result['spans_expected']} expected; errors: {result['errors']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
