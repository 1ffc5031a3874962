"""State store costs: what the request path and the background sync pay, memory vs Redis.

- `rate_acquire`: the one store call a request can wait on (only for keys with RPM/TPM limits);
  wall time and this process's CPU per call, sequential.
- `sync_once`: the background push + pull of one replica with 16 endpoints (breakers, in-flight,
  rate usage, the affinity log with 20 new chains of 60 blocks, latency statistics every 4th
  sync, rebuilding the latency summaries), per sync; at the default interval, 4 a second.

usage: python bench/routing_store.py [--redis redis://127.0.0.1:6379/0] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.catalog import Catalog, endpoints_from_settings
from gateway.config import load_config
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.settings import BreakerConfig
from gateway.routing.shared import SharedState
from gateway.state_store.base import StateStore
from gateway.state_store.memory import MemoryStore
from gateway.state_store.redis import RedisStore


async def timed(n: int, call: Any) -> dict[str, float]:
    await call()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await call()
    return {"wall_us": (time.perf_counter() - wall) / n * 1e6, "cpu_us": (time.process_time() - cpu) / n * 1e6}


async def measure(store: StateStore) -> dict[str, Any]:
    settings = load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.invalid/v1"}],
        deployments=[{"model": "m", "provider": "p", "id": f"e{i}", "routing": {"rpm": 10**6} if i < 4 else {}} for i in range(16)],
    )
    catalog = Catalog(endpoints_from_settings(settings), created=0)
    shared = SharedState(settings.routing, settings.state_store, catalog, store, CircuitBreaker(BreakerConfig()), replica_id="bench")
    rng = random.Random(1)
    acquire = await timed(2000, lambda: store.rate_acquire("key:bench", rpm=10**9, tpm=None, tokens=100, window_s=60))

    wall = cpu = 0.0
    for i in range(201):
        for _ in range(20):  # a tick's worth of finished requests (their feedback is not timed here)
            ep = f"e{rng.randrange(16)}"
            shared.learn_affinity(ep, [rng.getrandbits(64) for _ in range(60)], 0, None)
            shared.latency.observe(ep, rng.randrange(100, 5000), 0.2, 40.0)
        w, c = time.perf_counter(), time.process_time()
        await shared.sync_once()
        if i:
            wall += time.perf_counter() - w
            cpu += time.process_time() - c
    return {"rate_acquire": acquire, "sync_once_16_endpoints": {"wall_us": wall / 200 * 1e6, "cpu_us": cpu / 200 * 1e6}}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out = {"memory": await measure(MemoryStore())}
    prefix = f"gwbench:{uuid.uuid4().hex[:8]}:"
    redis_store = RedisStore(args.redis, prefix=prefix, timeout=1.0)
    try:
        out["redis"] = await measure(redis_store)
    finally:
        client = redis_store._r
        keys = [k async for k in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await redis_store.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{'backend':<8} {'rate_acquire wall':>18} {'cpu':>8} {'sync_once wall':>15} {'cpu':>8}   (microseconds)")
    for name, r in report.items():
        a, s = r["rate_acquire"], r["sync_once_16_endpoints"]
        print(f"{name:<8} {a['wall_us']:>18.1f} {a['cpu_us']:>8.1f} {s['wall_us']:>15.1f} {s['cpu_us']:>8.1f}")


if __name__ == "__main__":
    main()
