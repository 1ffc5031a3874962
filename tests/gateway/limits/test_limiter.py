"""The limits stage over the memory store and over the real Redis: limits shared by two
replicas, budgets that concurrent admission cannot overspend, settlement, teams, expiry and
allowed models, and what happens while the store is away."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.limits.errors import (
    KeyExpired,
    LimitsUnavailable,
    ModelNotAllowed,
    QuotaExceeded,
)
from gateway.limits.policy import period_bounds
from gateway.limits.redis_store import RedisLimitStore
from kernel.errors import AuthenticationFailed, PermissionDenied, RateLimited
from tests.gateway.limits.helpers import (
    ENDPOINT,
    Stores,
    answered,
    ctx,
    limiter,
    settings,
)


async def test_two_replicas_share_one_rpm_limit(stores: Stores) -> None:
    cfg = settings([{"name": "a", "rpm": 10}])
    one, two = limiter(cfg, stores.new()), limiter(cfg, stores.new())
    admitted = 0
    for i in range(10):
        await (one if i % 2 else two).admit(ctx("a"), [ENDPOINT])
        admitted += 1
    with pytest.raises(RateLimited) as refused:
        await one.admit(ctx("a"), [ENDPOINT])
    with pytest.raises(RateLimited):
        await two.admit(ctx("a"), [ENDPOINT])
    assert admitted == 10
    exc = refused.value
    assert exc.status_code == 429 and exc.code == "rate_limit_exceeded"
    h = exc.headers
    assert h["x-ratelimit-limit-requests"] == "10" and h["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(h["retry-after"]) <= 60
    assert h["x-ratelimit-reset-requests"].endswith("s")


async def test_tpm_counts_admitted_tokens_then_the_actual_ones(stores: Stores) -> None:
    cfg = settings([{"name": "a", "tpm": 300}])
    lim = limiter(cfg, stores.new())
    first = ctx("a", max_tokens=100, prompt=10)  # admitted as 110 tokens
    await lim.admit(first, [ENDPOINT])
    await lim.admit(ctx("a", max_tokens=100, prompt=10), [ENDPOINT])  # 220
    with pytest.raises(RateLimited) as refused:
        await lim.admit(ctx("a", max_tokens=100, prompt=10), [ENDPOINT])  # 330 > 300
    assert refused.value.headers["x-ratelimit-limit-tokens"] == "300"
    assert refused.value.headers["x-ratelimit-remaining-tokens"] == "80"
    answered(first, completion_tokens=5, prompt_tokens=5)  # actually 10 tokens: 100 come back
    lim.finished(first)
    await lim.flush()
    await lim.admit(ctx("a", max_tokens=100, prompt=10), [ENDPOINT])


async def test_concurrent_admission_never_overspends_the_budget(stores: Stores) -> None:
    """$1.00 budget; each request may cost $0.03 at worst (300 output tokens) but costs $0.01.
    80 at once through two replicas: their worst cases sum to $2.40, yet the spend never passes $1."""
    cfg = settings([{"name": "a", "budget_usd": 1.0, "budget_period": "daily"}])
    one, two = limiter(cfg, stores.new()), limiter(cfg, stores.new())
    contexts = [ctx("a", max_tokens=300) for _ in range(80)]

    async def attempt(i: int) -> bool:
        lim = one if i % 2 else two
        try:
            await lim.admit(contexts[i], [ENDPOINT])
        except QuotaExceeded:
            return False
        return True

    results = await asyncio.gather(*(attempt(i) for i in range(80)))
    admitted = [c for c, ok in zip(contexts, results) if ok]
    assert len(admitted) == 33  # floor(1.00 / 0.03): the worst cases of the admitted fit exactly
    period = period_bounds("daily", time.time())[0]
    (live,) = await one.store.spend([("key:a", period)])
    assert live == 33 * 30_000  # micro-dollars: never above the budget
    for c in admitted:
        answered(c, completion_tokens=100)  # $0.01 each
        (one if contexts.index(c) % 2 else two).finished(c)
    await one.flush()
    await two.flush()
    (settled,) = await one.store.spend([("key:a", period)])
    assert settled == 33 * 10_000  # the unused worst case came back: $0.33 spent


async def test_settlement_refunds_the_unused_worst_case(stores: Stores) -> None:
    cfg = settings([{"name": "a", "budget_usd": 0.05, "budget_period": "total"}])
    lim = limiter(cfg, stores.new())
    big = ctx("a", max_tokens=500)  # worst case $0.05: the whole budget
    await lim.admit(big, [ENDPOINT])
    with pytest.raises(QuotaExceeded) as refused:
        await lim.admit(ctx("a", max_tokens=100), [ENDPOINT])
    assert refused.value.status_code == 429 and refused.value.code == "insufficient_quota"
    assert refused.value.error_type == "insufficient_quota"
    assert refused.value.headers["x-should-retry"] == "false"
    answered(big, completion_tokens=200)  # $0.02
    lim.finished(big)
    await lim.flush()
    (spent,) = await lim.store.spend([("key:a", "total")])
    assert spent == 20_000
    await lim.admit(ctx("a", max_tokens=300), [ENDPOINT])  # $0.03 fits the $0.03 left
    with pytest.raises(QuotaExceeded):
        await lim.admit(ctx("a", max_tokens=1), [ENDPOINT])


async def test_a_failed_request_costs_nothing(stores: Stores) -> None:
    cfg = settings([{"name": "a", "budget_usd": 0.05, "budget_period": "total"}])
    lim = limiter(cfg, stores.new())
    c = ctx("a", max_tokens=500)
    await lim.admit(c, [ENDPOINT])
    c.status = 502  # no usage: the upstream failed
    lim.finished(c)
    await lim.flush()
    assert await lim.store.spend([("key:a", "total")]) == [0]


async def test_without_max_tokens_the_worst_case_is_the_context_window(stores: Stores) -> None:
    cfg = settings([{"name": "a", "budget_usd": 0.5, "budget_period": "total"}])
    lim = limiter(cfg, stores.new())
    # 8192-token window, 10 prompt tokens: 8182 output tokens at $100/M = $0.8182 > $0.50.
    with pytest.raises(QuotaExceeded):
        await lim.admit(ctx("a", max_tokens=None), [ENDPOINT])
    await lim.admit(ctx("a", max_tokens=4000), [ENDPOINT])  # $0.40


async def test_team_budget_binds_all_its_keys(stores: Stores) -> None:
    cfg = settings(
        [{"name": "a", "team": "t"}, {"name": "b", "team": "t", "budget_usd": 100.0}],
        teams={"t": {"budget_usd": 0.05, "budget_period": "monthly"}},
    )
    one, two = limiter(cfg, stores.new()), limiter(cfg, stores.new())
    for _ in range(3):
        await one.admit(ctx("a", max_tokens=100), [ENDPOINT])  # $0.03 of the team's $0.05
    await two.admit(ctx("b", max_tokens=200), [ENDPOINT])  # $0.05: full
    with pytest.raises(QuotaExceeded) as refused:
        await two.admit(ctx("b", max_tokens=1), [ENDPOINT])  # b's own $100 does not help
    assert "team t" in refused.value.message
    with pytest.raises(QuotaExceeded):
        await one.admit(ctx("a", max_tokens=1), [ENDPOINT])
    period = period_bounds("monthly", time.time())[0]
    assert await one.store.spend([("team:t", period), ("key:b", period)]) == [50_000, 20_000]


async def test_a_refusal_by_the_team_counts_nothing_against_the_key(stores: Stores) -> None:
    cfg = settings([{"name": "a", "team": "t", "rpm": 100}], teams={"t": {"rpm": 2}})
    lim = limiter(cfg, stores.new())
    await lim.admit(ctx("a"), [ENDPOINT])
    await lim.admit(ctx("a"), [ENDPOINT])
    for _ in range(3):
        with pytest.raises(RateLimited) as refused:
            await lim.admit(ctx("a"), [ENDPOINT])
        assert "team t" in refused.value.message and refused.value.headers["x-ratelimit-limit-requests"] == "2"
    if stores.kind == "memory":
        assert stores.memory._windows["key:a"].usage(time.monotonic(), 60.0)[0] == 2


async def test_max_parallel_frees_a_slot_on_settlement(stores: Stores) -> None:
    cfg = settings([{"name": "a", "max_parallel": 2}])
    one, two = limiter(cfg, stores.new()), limiter(cfg, stores.new())
    first, second = ctx("a"), ctx("a")
    await one.admit(first, [ENDPOINT])
    await two.admit(second, [ENDPOINT])
    with pytest.raises(RateLimited) as refused:
        await one.admit(ctx("a"), [ENDPOINT])
    assert "in flight" in refused.value.message
    two.finished(second)
    await two.flush()
    await one.admit(ctx("a"), [ENDPOINT])


async def test_expired_key_is_401_and_models_outside_the_patterns_403(stores: Stores) -> None:
    cfg = settings(
        [
            {"name": "old", "expires_at": datetime(2020, 1, 1, tzinfo=UTC).isoformat()},
            {"name": "narrow", "allowed_models": ["gpt-4o*", "m"]},
            {"name": "member", "team": "t"},
        ],
        teams={"t": {"allowed_models": ["other-*"]}},
    )
    lim = limiter(cfg, stores.new())
    with pytest.raises(KeyExpired) as expired:
        lim.check(ctx("old"))
    assert isinstance(expired.value, AuthenticationFailed) and expired.value.status_code == 401
    lim.check(ctx("narrow", model="m"))
    lim.check(ctx("narrow", model="gpt-4o-mini"))
    with pytest.raises(ModelNotAllowed) as denied:
        lim.check(ctx("narrow", model="gpt-5"))
    assert isinstance(denied.value, PermissionDenied) and denied.value.status_code == 403
    assert denied.value.code == "model_not_allowed"
    with pytest.raises(ModelNotAllowed, match="team 't'"):
        lim.check(ctx("member", model="m"))
    lim.check(ctx("member", model="other-x"))


async def test_routing_keys_rpm_follows_the_same_rules() -> None:
    from gateway.config import load_config
    from gateway.limits.stage import Limiter
    from gateway.limits.store import MemoryLimitStore

    cfg = load_config(
        environ={},
        auth={"keys": [{"name": "r", "key": "sk-routing-key-0001"}]},
        routing={"keys": {"r": {"rpm": 1}}},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    lim = Limiter(cfg, MemoryLimitStore(), {}.get)
    await lim.admit(ctx("r"), [ENDPOINT])
    with pytest.raises(RateLimited) as refused:
        await lim.admit(ctx("r"), [ENDPOINT])
    assert refused.value.headers["x-ratelimit-limit-requests"] == "1"


DEAD_REDIS = "redis://127.0.0.1:1/0"


async def test_store_down_local_only_limits_and_readyz_status() -> None:
    cfg = settings([{"name": "a", "rpm": 2}], on_store_failure="local", retry_store_after_s=60)
    lim = limiter(cfg, RedisLimitStore(DEAD_REDIS, timeout=0.05))
    await lim.admit(ctx("a"), [ENDPOINT])
    assert lim.status()["state"] == "local_only" and "redis" in lim.status()["reason"]
    assert lim.ready
    await lim.admit(ctx("a"), [ENDPOINT])
    with pytest.raises(RateLimited):  # the limit still holds, on this replica
        await lim.admit(ctx("a"), [ENDPOINT])
    await lim.aclose()


async def test_store_down_fail_closed_refuses_limited_keys_only() -> None:
    cfg = settings([{"name": "a", "rpm": 2}, {"name": "free"}], on_store_failure="closed")
    lim = limiter(cfg, RedisLimitStore(DEAD_REDIS, timeout=0.05))
    with pytest.raises(LimitsUnavailable) as refused:
        await lim.admit(ctx("a"), [ENDPOINT])
    assert refused.value.status_code == 503 and refused.value.headers["retry-after"] == "1"
    await lim.admit(ctx("free"), [ENDPOINT])  # no limits: nothing to check
    assert lim.status()["state"] == "refusing" and not lim.ready
    await lim.aclose()


async def test_absurd_max_tokens_and_budgets_stay_in_the_stores_range(stores: Stores) -> None:
    """A client's max_tokens of 10**30 is refused by a budget, and a budget of $1e300 is capped,
    without an overflow in Redis (which would read as an outage)."""
    cfg = settings([{"name": "a", "budget_usd": 1.0, "budget_period": "total"}, {"name": "rich", "budget_usd": 1e300, "budget_period": "total"}])
    lim = limiter(cfg, stores.new())
    with pytest.raises(QuotaExceeded):
        await lim.admit(ctx("a", max_tokens=10**30), [ENDPOINT])
    with pytest.raises(QuotaExceeded):
        await lim.admit(ctx("rich", max_tokens=10**30), [ENDPOINT])
    big = ctx("rich", max_tokens=10**12)  # $1e8 at worst: within the capped budget
    await lim.admit(big, [ENDPOINT])
    answered(big, completion_tokens=100)
    lim.finished(big)
    await lim.flush()
    assert lim.store_error is None and lim.settle_failures == 0
    assert await lim.store.spend([("key:rich", "total")]) == [10_000]


class SlowStore:
    """The memory store, whose admissions are counted at once but answered late (a slow Redis:
    the script ran on the server, its reply is still on the way)."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner, self.delay, self.name = inner, delay, "slow"

    async def admit(self, *args: Any) -> Any:
        verdict = await self.inner.admit(*args)
        await asyncio.sleep(self.delay)
        return verdict

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_an_admission_abandoned_by_its_client_gives_its_slot_and_charge_back() -> None:
    """The client left while its admission was in the store: the request never runs, so what
    the store counted for it comes back (else its parallel slot stays taken until the lease ends)."""
    from gateway.limits.store import MemoryLimitStore

    memory = MemoryLimitStore()
    cfg = settings([{"name": "a", "max_parallel": 1, "budget_usd": 1.0, "budget_period": "total"}])
    lim = limiter(cfg, SlowStore(memory, 0.05))
    task = asyncio.create_task(lim.admit(ctx("a", max_tokens=100), [ENDPOINT]))
    await asyncio.sleep(0.01)
    task.cancel()  # the client went away (the route's disconnect watcher cancels the request)
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.1)  # the store finishes the admission meanwhile
    await lim.flush()
    assert await memory.spend([("key:a", "total")]) == [0]
    await lim.admit(ctx("a", max_tokens=100), [ENDPOINT])  # the slot is free again


async def test_routing_default_key_limits_each_key_on_its_own() -> None:
    """routing.default_key's rpm applies to every key without its own limits, counted per key
    (as routing counted it), database keys included."""
    from gateway.config import load_config
    from gateway.limits.policy import KeyRecord, Scope
    from gateway.limits.stage import Limiter
    from gateway.limits.store import MemoryLimitStore

    cfg = load_config(
        environ={},
        auth={"keys": [{"name": "x", "key": "sk-default-key-x001"}, {"name": "own", "key": "sk-default-own-001", "rpm": 3}]},
        routing={"default_key": {"rpm": 1}},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    lim = Limiter(cfg, MemoryLimitStore(), {}.get)
    lim.set_stored({"db": KeyRecord(Scope("key", "db"))})
    for key in ("x", "db", None):
        await lim.admit(ctx(key), [ENDPOINT])
        with pytest.raises(RateLimited):
            await lim.admit(ctx(key), [ENDPOINT])
    for _ in range(3):
        await lim.admit(ctx("own"), [ENDPOINT])


async def test_a_daily_budget_resets_at_utc_midnight(stores: Stores) -> None:
    cfg = settings([{"name": "a", "budget_usd": 0.02, "budget_period": "daily"}])
    now = [datetime(2026, 12, 1, 23, 59, 58, tzinfo=UTC).timestamp()]
    lim = limiter(cfg, stores.new(), wall=lambda: now[0])
    await lim.admit(ctx("a", max_tokens=200), [ENDPOINT])  # $0.02: the day's budget
    with pytest.raises(QuotaExceeded) as refused:
        await lim.admit(ctx("a", max_tokens=1), [ENDPOINT])
    assert refused.value.headers["retry-after"] == "2" and "resets in 2s" in refused.value.message
    now[0] += 3  # 00:00:01 the next day
    await lim.admit(ctx("a", max_tokens=200), [ENDPOINT])
    assert await lim.store.spend([("key:a", "d20261201"), ("key:a", "d20261202")]) == [20_000, 20_000]
