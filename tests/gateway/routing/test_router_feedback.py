"""The route stage's feedback: what the affinity index learns, and when."""

from __future__ import annotations

import random

from gateway.catalog import Catalog
from gateway.config import Settings
from gateway.pipeline.context import RequestContext
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.router import Router
from gateway.routing.settings import BreakerConfig
from gateway.routing.shared import SharedState
from gateway.state_store.memory import MemoryStore
from kernel.values import Usage
from tests.gateway.routing.helpers import local


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def router() -> tuple[Router, SharedState, Clock]:
    settings, clock = Settings(), Clock()
    catalog = Catalog([local("local-0", slots=4), local("local-1", slots=4)], created=0)
    shared = SharedState(settings.routing, settings.state_store, catalog, MemoryStore(clock), CircuitBreaker(BreakerConfig()), clock=clock)
    return Router(settings.routing, catalog, shared, clock=clock, rng=random.Random(1)), shared, clock


async def test_the_prompt_counts_as_cached_from_its_first_token_not_only_from_the_end() -> None:
    r, shared, clock = router()
    body = {"model": "m", "messages": [{"role": "system", "content": "You are terse. " * 200}, {"role": "user", "content": "hi"}]}
    ctx = RequestContext(request_id="r1", op="chat", started=clock(), key_name=None, body=body, model="m", stream=True)
    ordering = await r.route(ctx, r.catalog.candidates("m"))
    endpoint, chain = ordering.endpoints[0], ctx.route.features.chain
    assert len(chain) > 4
    r.attempt_started(ctx, endpoint, clock())
    assert shared.affinity.match(endpoint.id, chain, clock()) == 0
    clock.now += 0.5
    # Prefilled: the engine holds these blocks while it decodes, and they take room in its cache.
    r.attempt_committed(ctx, endpoint, clock())
    assert shared.affinity.match(endpoint.id, chain, clock()) == len(chain)
    assert shared.affinity.match("local-1" if endpoint.id == "local-0" else "local-0", chain, clock()) == 0
    # The end confirms it from the report, as before.
    clock.now += 2.0
    ctx.usage = Usage(prompt_tokens=800, completion_tokens=20, cached_tokens=0, cache_reported=True)
    r.finished(ctx)
    assert shared.affinity.match(endpoint.id, chain, clock()) == len(chain)
