"""Limiters for the tests: over the memory store, or over the real Redis (a unique key prefix per
test, deleted afterwards), two at a time to model two replicas sharing the store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.catalog import Endpoint
from gateway.config import Settings, load_config
from gateway.limits.redis_store import RedisLimitStore
from gateway.limits.stage import Limiter
from gateway.limits.store import LimitStore, MemoryLimitStore
from gateway.pipeline.context import RequestContext
from kernel.values import Usage
from tests.fakes.catalog import make_endpoint
from tests.gateway.state_store.redis_helpers import (
    REDIS_URL,
    delete_prefix,
    redis_available,
    unique_prefix,
)
from tests.services import require

# $100 per 1M output tokens, nothing for input: 100 output tokens cost exactly $0.01.
PRICE = {"input": 0.0, "output": 100.0}
ENDPOINT = make_endpoint("p/m", "m", price=PRICE)


def settings(keys: list[dict[str, Any]], **limits: Any) -> Settings:
    return load_config(
        environ={},
        auth={"keys": [{"key": f"sk-test-key-{k['name']}-0001", **k} for k in keys]},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p", "price": PRICE}],
        limits=limits,
    )


class Stores:
    """Makes stores that share one backend: the same MemoryLimitStore, or Redis under one prefix."""

    def __init__(self, kind: str, prefix: str) -> None:
        self.kind = kind
        self.prefix = prefix
        self.memory = MemoryLimitStore()
        self.opened: list[RedisLimitStore] = []

    def new(self) -> LimitStore:
        if self.kind == "memory":
            return self.memory
        store = RedisLimitStore(REDIS_URL, prefix=self.prefix, timeout=1.0)
        self.opened.append(store)
        return store


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.services)])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    if request.param == "redis":
        require(redis_available(), f"Redis is not answering at {REDIS_URL} (scripts/services.sh starts it)")
    prefix = unique_prefix()
    made = Stores(request.param, prefix)
    try:
        yield made
    finally:
        for store in made.opened:
            await store.aclose()
        if request.param == "redis":
            delete_prefix(prefix)


def limiter(cfg: Settings, store: LimitStore, **kw: Any) -> Limiter:
    prices = {"p/m": ENDPOINT.deployment.price}
    return Limiter(cfg, store, prices.get, **kw)


_ids = iter(range(10**9))


def ctx(key: str | None, *, model: str = "m", max_tokens: int | None = 100, prompt: int = 10, n: int = 1) -> RequestContext:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}], "n": n}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    c = RequestContext(request_id=f"r{next(_ids)}", op="chat", started=0.0, key_name=key, body=body, model=model)
    out = max_tokens if max_tokens is not None else 256
    c.route = SimpleNamespace(
        features=SimpleNamespace(prompt_tokens=prompt, max_output_tokens=max_tokens, expected_output_tokens=out * n)
    )
    return c


def answered(c: RequestContext, completion_tokens: int, prompt_tokens: int = 10, endpoint: Endpoint = ENDPOINT) -> None:
    c.endpoint_id = endpoint.id
    c.usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
