"""Policies: pure functions of (candidates, snapshot, features, config, rng)."""

from __future__ import annotations

import random

from gateway.routing.policies import POLICIES
from gateway.routing.policies.scored import choose
from gateway.routing.settings import POLICY_NAMES, Guards, RoutingConfig
from gateway.routing.snapshot import StaticSnapshot
from tests.gateway.routing.helpers import chat, endpoint, features, local

PRIOR = {"ttft_s": 0.2, "prefill_tps": 1000.0, "decode_tps": 50.0}
LONG = chat("lorem ipsum dolor sit amet " * 400, max_tokens=100)
CFG = RoutingConfig()


def ids(decision: object) -> list[str]:
    return [sc.endpoint.id for sc in decision.ranked]  # type: ignore[attr-defined]


def test_registry_matches_the_config_names() -> None:
    assert tuple(POLICIES) == POLICY_NAMES


def test_same_inputs_same_decision() -> None:
    a, b, c = (local(f"l-{i}", **PRIOR) for i in range(3))
    snap = StaticSnapshot(endpoints=(a, b, c), inflights={"l-0": 1}, matches={"l-2": 10})
    f = features(LONG)
    first = choose([a, b, c], snap, f, CFG, random.Random(1))
    again = choose([a, b, c], snap, f, CFG, random.Random(2))
    assert ids(first) == ids(again) and [sc.score for sc in first.ranked] == [sc.score for sc in again.ranked]


def test_cheaper_wins_when_latency_is_equal() -> None:
    cheap = endpoint("cheap/m", price={"input": 0.1, "output": 0.1}, routing=PRIOR)
    dear = endpoint("dear/m", price={"input": 5.0, "output": 5.0}, routing=PRIOR)
    d = choose([dear, cheap], StaticSnapshot(endpoints=(dear, cheap)), features(LONG), CFG, random.Random(0))
    assert ids(d) == ["cheap/m", "dear/m"]


def test_ties_keep_configuration_order() -> None:
    a, b = endpoint("a/m", routing=PRIOR), endpoint("b/m", routing=PRIOR)
    for order in ([a, b], [b, a]):
        d = choose(order, StaticSnapshot(endpoints=(a, b)), features(), CFG, random.Random(0))
        assert ids(d) == [ep.id for ep in order]


def test_affinity_beats_an_idle_replica_until_the_load_guard() -> None:
    a, b = local("l-0", slots=4, **PRIOR), local("l-1", slots=4, **PRIOR)
    f = features(LONG)
    hit = StaticSnapshot(endpoints=(a, b), matches={"l-1": len(f.chain)}, inflights={"l-1": 1})
    d = choose([a, b], hit, f, CFG, random.Random(0))
    assert ids(d)[0] == "l-1" and d.guard is None
    # l-1 has 3 more in flight than l-0 and more than 1.5x as many: least-loaded wins.
    piled = StaticSnapshot(endpoints=(a, b), matches={"l-1": len(f.chain)}, inflights={"l-1": 3})
    d = choose([a, b], piled, f, CFG, random.Random(0))
    assert ids(d)[0] == "l-0" and d.guard == "imbalance"


def test_stickiness_breaks_when_the_ttft_penalty_is_too_high() -> None:
    # Caching on `slow` saves a lot of money (cost weight high) but it is 7 s slower.
    cfg = RoutingConfig(weights={"cost": 1000.0}, guards=Guards(max_ttft_penalty_s=5.0))
    slow = endpoint("slow/m", price={"input": 0.0, "output": 0.0}, routing={"ttft_s": 8.0, "prefill_tps": 1e6, "decode_tps": 50})
    fast = endpoint("fast/m", price={"input": 1.0, "output": 1.0}, routing={"ttft_s": 1.0, "prefill_tps": 1e6, "decode_tps": 50})
    snap = StaticSnapshot(endpoints=(slow, fast))
    d = choose([slow, fast], snap, features(LONG), cfg, random.Random(0))
    assert ids(d)[0] == "fast/m" and d.guard == "ttft_penalty"
    relaxed = RoutingConfig(weights={"cost": 1000.0}, guards=Guards(max_ttft_penalty_s=10.0))
    d = choose([slow, fast], snap, features(LONG), relaxed, random.Random(0))
    assert ids(d)[0] == "slow/m" and d.guard is None


def test_exploration_uses_the_injected_rng() -> None:
    a, b = endpoint("a/m", routing=PRIOR), endpoint("b/m", routing={**PRIOR, "ttft_s": 0.3})
    cfg = RoutingConfig(guards=Guards(explore=0.5))
    snap = StaticSnapshot(endpoints=(a, b))
    guards = [choose([a, b], snap, features(), cfg, random.Random(seed)).guard for seed in range(40)]
    assert "explore" in guards and None in guards
    again = [choose([a, b], snap, features(), cfg, random.Random(seed)).guard for seed in range(40)]
    assert guards == again


def test_sort_by_price_latency_throughput() -> None:
    cheap_slow = endpoint("cs/m", price={"input": 0.1, "output": 0.1}, routing={"ttft_s": 2.0, "prefill_tps": 1e5, "decode_tps": 20})
    dear_fast = endpoint("df/m", price={"input": 3.0, "output": 3.0}, routing={"ttft_s": 0.1, "prefill_tps": 1e5, "decode_tps": 200})
    snap = StaticSnapshot(endpoints=(cheap_slow, dear_fast))
    for sort, first in (("price", "cs/m"), ("latency", "df/m"), ("throughput", "df/m")):
        f = features(chat("x", provider={"sort": sort}))
        assert ids(choose([dear_fast, cheap_slow], snap, f, CFG, random.Random(0)))[0] == first


def test_cold_miss_home_is_bounded_by_load() -> None:
    eps = [local(f"l-{i}", **PRIOR) for i in range(4)]
    f = features(LONG)
    idle = StaticSnapshot(endpoints=tuple(eps))
    home = choose(eps, idle, f, CFG, random.Random(0)).home
    assert home is not None
    # Whatever the order of the candidates, the same home (replicas agree).
    assert choose(list(reversed(eps)), idle, f, CFG, random.Random(5)).home == home
    busy = StaticSnapshot(endpoints=tuple(eps), inflights={home: 3})
    moved = choose(eps, busy, f, CFG, random.Random(0))
    assert moved.home not in (None, home)


def test_round_robin_follows_the_sequence() -> None:
    eps = [endpoint(f"e{i}/m") for i in range(3)]
    firsts = [ids(POLICIES["round_robin"](eps, StaticSnapshot(sequences={"m": n}), features(), CFG, random.Random(0)))[0] for n in range(4)]
    assert firsts == ["e0/m", "e1/m", "e2/m", "e0/m"]


def test_least_loaded() -> None:
    eps = [local(f"l-{i}", slots=2) for i in range(3)]
    d = POLICIES["least_loaded"](eps, StaticSnapshot(inflights={"l-0": 2, "l-1": 1, "l-2": 2}), features(), CFG, random.Random(0))
    assert ids(d)[0] == "l-1"


def test_session_sticky_follows_the_family() -> None:
    eps = [local(f"l-{i}") for i in range(4)]
    first_turn = features(chat("plan the trip", system="You are a travel agent."))
    later = {"model": "m", "messages": [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "plan the trip"},
        {"role": "assistant", "content": "Where to?"},
        {"role": "user", "content": "Lisbon"},
    ]}
    pick = ids(POLICIES["session_sticky"](eps, StaticSnapshot(), first_turn, CFG, random.Random(0)))[0]
    assert ids(POLICIES["session_sticky"](eps, StaticSnapshot(inflights={pick: 9}), features(later), CFG, random.Random(0)))[0] == pick


def test_config_order_and_random() -> None:
    eps = [endpoint(f"e{i}/m") for i in range(5)]
    assert ids(POLICIES["config_order"](eps, StaticSnapshot(), features(), CFG, random.Random(0))) == [e.id for e in eps]
    shuffled = ids(POLICIES["random"](eps, StaticSnapshot(), features(), CFG, random.Random(3)))
    assert sorted(shuffled) == sorted(e.id for e in eps)
    assert shuffled == ids(POLICIES["random"](eps, StaticSnapshot(), features(), CFG, random.Random(3)))


def test_no_candidates() -> None:
    for policy in POLICIES.values():
        assert policy([], StaticSnapshot(), features(), CFG, random.Random(0)).ranked == []


def test_a_new_conversation_avoids_an_over_committed_cache() -> None:
    # Both hold the shared system prompt; l-0's cache drops untouched blocks after 5 s (live
    # conversations over-commit it), l-1's keep a minute: the next turns will find theirs on l-1.
    a, b = local("l-0", slots=64, **PRIOR), local("l-1", slots=64, **PRIOR)
    f = features(LONG)
    shared = {"l-0": len(f.chain) // 2, "l-1": len(f.chain) // 2}
    snap = StaticSnapshot(endpoints=(a, b), matches=shared, residences={"l-0": 5.0, "l-1": 60.0})
    d = choose([a, b], snap, f, CFG, random.Random(0))
    assert ids(d)[0] == "l-1" and d.ranked[0].evict < d.ranked[1].evict
    # Without the term (or without pressure) the tie keeps configuration order.
    d = choose([a, b], snap, f, RoutingConfig(weights={"evict": 0.0}), random.Random(0))
    assert ids(d)[0] == "l-0"
    # A conversation whose history l-0 holds stays there: moving would re-prefill it all now.
    held = StaticSnapshot(endpoints=(a, b), matches={"l-0": len(f.chain), "l-1": len(f.chain) // 2}, residences={"l-0": 5.0, "l-1": 60.0})
    assert ids(choose([a, b], held, f, CFG, random.Random(0)))[0] == "l-0"
