"""The in-process, paired A/B measurement for bench/persistence_overhead.py (see its docstring)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import orjson

from gateway.app import create_app
from gateway.config import Settings, load_config
from gateway.persistence import migrate
from gateway.persistence.engine import make_engine
from gateway.state import AppState
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse

KEY = "bench-key-0123456789abcdef"
BODY = orjson.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 32})
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "mock-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
    }
)
now = time.perf_counter


def upstream(request: UpstreamRequest) -> MockResponse:
    return MockResponse(200, {"content-type": "application/json"}, ANSWER)


def settings_for(variant: str, tmp: Path, pg_url: str | None) -> Settings:
    config: dict[str, Any] = {
        "auth": {"keys": [{"name": "bench", "key": KEY}]},
        "providers": [{"name": "mock", "base_url": "http://mock.test/v1"}],
        "deployments": [{"model": "mock-model", "provider": "mock", "price": {"input": 0.1, "output": 0.4}}],
    }
    if variant != "off":
        url = f"sqlite:///{tmp / 'inprocess.db'}" if variant == "sqlite" else pg_url
        config["database"] = {"url": url}
        config["persistence"] = {"enabled": True, "spill_path": str(tmp / f"inprocess-spill-{variant}.jsonl")}
    return load_config(environ={}, **config)


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    """The app with its lifespan entered; yields (app, lifespan state)."""
    if settings.persistence.enabled:
        engine = make_engine(settings.database)
        migrate.upgrade(engine)
        engine.dispose()
    app = create_app(settings, client_factory=lambda: MockHTTPClient(upstream))
    async with app.router.lifespan_context(app) as state:
        yield app, dict(state or {})


async def call(app: Any, state: dict[str, Any], i: int) -> tuple[int, float]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"bench"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-length", str(len(BODY)).encode()),
            (b"x-request-id", f"bench-{i}".encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": state.copy(),
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    start = now()
    await app(scope, receive, send)
    return status, now() - start


def sink_cost(app_state: AppState, n: int = 1000, repeats: int = 5) -> dict[str, float]:
    """Microseconds per `submit` of each request observer that records (metrics, persistence),
    alone (best of `repeats`; the queue has room for every record, so none spills)."""
    from kernel.records import RequestRecord  # here: overhead_inprocess.py also runs checkouts from before kernel/
    record = RequestRecord(
        "bench", "bench", "mock-model", "mock/mock-model", "chat", False, 1, 200, None, 12, 0, 9, 1e-6, None, 0.001, 0.1
    )
    out = {}
    for sink in (o for o in app_state.feedback.members if hasattr(o, "submit")):
        best = float("inf")
        for _ in range(repeats):
            start = now()
            for _ in range(n):
                sink.submit(record)
            best = min(best, (now() - start) / n)
        out[type(sink).__name__] = best * 1e6
    return out


async def measure(variants: list[str], tmp: Path, pg_url: str | None, requests: int, warmup: int) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        apps = {v: await stack.enter_async_context(running(settings_for(v, tmp, pg_url))) for v in variants}
        samples: dict[str, list[float]] = {v: [] for v in variants}
        errors = 0
        for i in range(warmup + requests):
            order = variants if i % 2 == 0 else variants[::-1]
            for v in order:
                app, state = apps[v]
                status, took = await call(app, state, i)
                errors += status != 200
                if i >= warmup:
                    samples[v].append(took)
            if i % 50 == 0:
                await asyncio.sleep(0)  # let the writers wake even if no request yields
        written = {}
        for v in variants:
            p = apps[v][1]["gw"].persistence
            if p is None:
                continue
            deadline = now() + 10
            while p.stats.written < warmup + requests and now() < deadline:  # before the sink timing adds more
                await asyncio.sleep(0.05)
            written[v] = p.stats.written
        sinks = {v: sink_cost(apps[v][1]["gw"]) for v in variants}
    p50 = {v: statistics.median(s) * 1000 for v, s in samples.items()}
    p99 = {v: sorted(s)[int(len(s) * 0.99) - 1] * 1000 for v, s in samples.items()}
    return {
        "requests_per_variant": requests,
        "errors": errors,
        "p50_ms": p50,
        "p99_ms": p99,
        "added_p50_ms": {v: p50[v] - p50["off"] for v in variants if v != "off"},
        "records_written": written,
        "records_expected": warmup + requests,
        "sink_us_per_record": sinks,
    }
