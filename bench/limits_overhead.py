"""Limits and budgets: what the stage adds per request, at 2,000 keys (half of them in teams).

Timed, in one process, per request: `check` + `admit` before dispatch and `finished` + its
settlement after, for keys with rpm, tpm, max_parallel and a daily budget (their team has a budget
too), on the memory store and on the real Redis; and the same calls for keys without limits
(limits off: a dict lookup). Sequential p50/p99 of admission (the part the client waits for), and
admissions per second with 64 in flight. No HTTP: the HTTP path's own cost is in bench/overhead.py.

usage: python bench/limits_overhead.py [--redis URL] [--requests N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import load_config
from gateway.limits.redis_store import RedisLimitStore
from gateway.limits.stage import Limiter
from gateway.limits.store import LimitStore, MemoryLimitStore
from gateway.pipeline.context import RequestContext
from kernel.values import Usage
from tests.fakes.catalog import make_endpoint

KEYS = 2000
ENDPOINT = make_endpoint("p/m", "m", price={"input": 1.0, "output": 4.0})


def settings(limited: bool) -> Any:
    limits = {"rpm": 10**6, "tpm": 10**9, "max_parallel": 1000, "budget_usd": 10**6, "budget_period": "daily"} if limited else {}
    keys = [{"name": f"k{i}", "key": f"sk-bench-key-{i:06d}", **limits, **({"team": f"t{i % 50}"} if limited and i % 2 else {})} for i in range(KEYS)]
    teams = {f"t{i}": {"budget_usd": 10**6, "rpm": 10**7} for i in range(50)} if limited else {}
    return load_config(
        environ={},
        auth={"keys": keys},
        limits={"teams": teams},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p", "price": {"input": 1.0, "output": 4.0}}],
    )


def ctx(key: str) -> RequestContext:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}
    c = RequestContext(request_id="r", op="chat", started=0.0, key_name=key, body=body, model="m")
    c.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=200, expected_output_tokens=200))
    return c


async def one(lim: Limiter, key: str) -> float:
    c = ctx(key)
    start = time.perf_counter()
    lim.check(c)
    await lim.admit(c, [ENDPOINT])
    admitted = time.perf_counter() - start
    c.endpoint_id, c.usage = ENDPOINT.id, Usage(prompt_tokens=50, completion_tokens=120)
    lim.finished(c)
    return admitted


async def measure(lim: Limiter, n: int, rng: random.Random) -> dict[str, float]:
    for _ in range(200):  # warm: scripts loaded, connections open
        await one(lim, f"k{rng.randrange(KEYS)}")
    await lim.flush()
    samples = []
    for _ in range(n):
        samples.append(await one(lim, f"k{rng.randrange(KEYS)}"))
        await lim.flush()
    samples.sort()
    start = time.perf_counter()
    sem = asyncio.Semaphore(64)

    async def bounded() -> None:
        async with sem:
            await one(lim, f"k{rng.randrange(KEYS)}")

    await asyncio.gather(*(bounded() for _ in range(n)))
    await lim.flush(30)
    rate = n / (time.perf_counter() - start)
    return {
        "admit_p50_ms": statistics.median(samples) * 1000,
        "admit_p99_ms": samples[int(len(samples) * 0.99)] * 1000,
        "admissions_per_s_64_in_flight": rate,
    }


async def run(redis_url: str | None, n: int) -> dict[str, Any]:
    rng = random.Random(7)
    out: dict[str, Any] = {"keys": KEYS, "requests": n}
    prices = {ENDPOINT.id: ENDPOINT.deployment.price}.get
    off = Limiter(settings(False), MemoryLimitStore(), prices)
    out["off"] = await measure(off, n, rng)
    on = settings(True)
    out["memory"] = await measure(Limiter(on, MemoryLimitStore(), prices), n, rng)
    if redis_url:
        prefix = f"gwbench:{uuid.uuid4().hex[:8]}:"
        store: LimitStore = RedisLimitStore(redis_url, prefix=prefix, timeout=1.0)
        try:
            out["redis"] = await measure(Limiter(on, store, prices), n, rng)
        finally:
            import redis

            r = redis.Redis.from_url(redis_url)
            keys = list(r.scan_iter(match=prefix + "*", count=1000))
            if keys:
                r.delete(*keys)
            r.close()
            await store.aclose()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis URL ('' to skip)")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = asyncio.run(run(args.redis or None, args.requests))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['keys']} keys, {result['requests']} requests per measurement")
    for name in ("off", "memory", "redis"):
        if name in result:
            r = result[name]
            print(f"{name:7} admit p50 {r['admit_p50_ms']:.3f} ms  p99 {r['admit_p99_ms']:.3f} ms  "
                  f"{r['admissions_per_s_64_in_flight']:.0f} admissions/s (64 in flight)")


if __name__ == "__main__":
    main()
