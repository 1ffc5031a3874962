"""The route stage for a model with one deployment: filters rule, nothing is scored or hashed."""

from __future__ import annotations

import random

import pytest

from gateway.catalog import Catalog, Endpoint
from gateway.config import Settings
from gateway.pipeline.context import RequestContext
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.preferences import parse
from gateway.routing.router import Router
from gateway.routing.settings import BreakerConfig
from gateway.routing.shared import SharedState
from gateway.state_store.memory import MemoryStore
from kernel.errors import InvalidRequest
from kernel.values import Usage
from tests.gateway.routing.helpers import endpoint, local

LONG = {"role": "system", "content": "You are terse. " * 200}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def router(*endpoints: Endpoint) -> tuple[Router, SharedState, Clock]:
    settings, clock = Settings(), Clock()
    catalog = Catalog(list(endpoints), created=0)
    shared = SharedState(settings.routing, settings.state_store, catalog, MemoryStore(clock), CircuitBreaker(BreakerConfig()), clock=clock)
    return Router(settings.routing, catalog, shared, clock=clock, rng=random.Random(1)), shared, clock


def context(clock: Clock, body: dict) -> RequestContext:
    return RequestContext(request_id="r1", op="chat", started=clock(), key_name=None, body=body, model=body["model"], stream=True)


async def test_one_deployment_is_not_scored_and_the_header_says_so() -> None:
    r, shared, clock = router(local("local-0", slots=4))
    ctx = context(clock, {"model": "m", "messages": [LONG, {"role": "user", "content": "hi"}]})
    ordering = await r.route(ctx, r.catalog.candidates("m"))
    assert [ep.id for ep in ordering.endpoints] == ["local-0"]
    decision = ctx.route.decision
    assert decision.sole and not decision.ranked[0].scored
    assert ctx.route_header == "local-0; policy=score; sole"
    # No affinity chain: it could only steer a choice between deployments.
    assert ctx.route.features.chain == []
    assert ctx.route.features.est_prompt_tokens > 500  # the filters' estimate is still there
    endpoint_ = ordering.endpoints[0]
    r.attempt_started(ctx, endpoint_, clock())
    assert shared.inflight("local-0") == 1
    r.attempt_committed(ctx, endpoint_, clock())
    ctx.usage = Usage(prompt_tokens=800, completion_tokens=20, cached_tokens=0, cache_reported=True)
    clock.now += 1.0
    r.finished(ctx)
    assert shared.inflight("local-0") == 0


async def test_two_deployments_are_still_scored_and_hashed() -> None:
    r, _, clock = router(local("local-0", slots=4), local("local-1", slots=4))
    ctx = context(clock, {"model": "m", "messages": [LONG, {"role": "user", "content": "hi"}]})
    await r.route(ctx, r.catalog.candidates("m"))
    assert not ctx.route.decision.sole
    assert ctx.route.decision.ranked[0].scored
    assert len(ctx.route.features.chain) > 4
    assert "; score=" in ctx.route_header and "sole" not in ctx.route_header


async def test_a_hard_filter_on_the_one_deployment_is_still_a_400() -> None:
    r, _, clock = router(endpoint("small", context_window=64))
    ctx = context(clock, {"model": "m", "messages": [LONG, {"role": "user", "content": "hi"}]})
    with pytest.raises(InvalidRequest) as err:
        await r.route(ctx, r.catalog.candidates("m"))
    assert err.value.code == "context_length_exceeded"


async def test_a_soft_filter_on_the_one_deployment_fails_open() -> None:
    r, shared, clock = router(endpoint("flaky"))
    for _ in range(50):
        shared.breaker.record("flaky", False, clock())
    ctx = context(clock, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    ordering = await r.route(ctx, r.catalog.candidates("m"))
    assert [ep.id for ep in ordering.endpoints] == ["flaky"]
    assert ordering.fail_open == "circuit_open"
    assert not ctx.route.decision.sole
    assert ctx.route_header.endswith("fail_open=circuit_open")


async def test_one_deployment_that_takes_prompt_cache_key_still_shards_by_conversation() -> None:
    r, _, clock = router(endpoint("oai", kind="openai"))
    keys = set()
    for i in range(200):  # one hot family, many conversations: past shard_rpm it splits
        body = {"model": "m", "messages": [LONG, {"role": "user", "content": f"question {i} " * 40}, {"role": "assistant", "content": "ok"}]}
        ctx = context(clock, body)
        await r.route(ctx, r.catalog.candidates("m"))
        assert ctx.route.decision.sole and ctx.route.features.chain
        keys.add(ctx.body_extra["oai"]["prompt_cache_key"])
        clock.now += 0.1
    assert len(keys) > 1


async def test_the_route_stage_reads_the_preferences_the_context_accepted() -> None:
    r, _, clock = router(endpoint("a"), endpoint("b"))
    # The body's own `provider` is not parsed again (it would be a 400): ctx.prefs decides.
    ctx = context(clock, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "provider": {"bogus": 1}})
    ctx.prefs = parse({"ignore": ["a"]})
    ordering = await r.route(ctx, r.catalog.candidates("m"))
    assert [ep.id for ep in ordering.endpoints] == ["b"]
    assert [(x.endpoint.id, x.reason) for x in ctx.route.decision.filtered] == [("a", "pref_ignored")]
