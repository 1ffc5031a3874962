"""Every score term, computed by hand from the snapshot and compared with the scorer's."""

from __future__ import annotations

import random

import pytest

from gateway.routing.affinity import predicted_hit
from gateway.routing.decision import TERMS
from gateway.routing.policies.scored import choose
from gateway.routing.scoring import CLOUD_SLOTS, score_candidate
from gateway.routing.settings import RoutingConfig, Weights
from gateway.routing.snapshot import StaticSnapshot
from tests.gateway.routing.helpers import chat, endpoint, features, local

W = Weights(cost=2.0, ttft=1.5, work=0.7, decode=0.5, load=0.8, quality=1.0, home=1.0)
PRIOR = {"ttft_s": 0.2, "prefill_tps": 1000.0, "decode_tps": 50.0}
PRICE = {"input": 1.0, "cached_input": 0.1, "output": 2.0}
LONG = chat("lorem ipsum dolor sit amet " * 400, max_tokens=100)  # ~2.7k estimated tokens, ~40 blocks


def cloud(id: str = "c/m", **routing: float) -> object:
    return endpoint(id, kind="deepseek", price=PRICE, routing={**PRIOR, **routing})


def test_ttft_is_the_prefill_of_the_uncached_part() -> None:
    ep = cloud()
    f = features(LONG)
    sc = score_candidate(ep, f, StaticSnapshot(endpoints=(ep,)), W)
    assert sc.ttft == pytest.approx(W.ttft * (0.2 + f.prompt_tokens / 1000.0))
    assert sc.ttft_s == pytest.approx(0.2 + f.prompt_tokens / 1000.0)
    assert sc.prefill_s == pytest.approx(f.prompt_tokens / 1000.0)


def test_a_cache_hit_lowers_ttft_and_cost() -> None:
    ep = cloud()
    f = features(LONG)
    blocks = 20
    snap = StaticSnapshot(endpoints=(ep,), matches={ep.id: blocks}, reliabilities={ep.id: 0.9})
    sc = score_candidate(ep, f, snap, W)
    matched = f.matched_tokens(blocks)
    hit = predicted_hit(matched, 0.9, snap.profile(ep))
    assert 0 < hit <= matched < f.prompt_tokens
    assert hit % 64 == 0  # DeepSeek's profile: 64-token units
    uncached = f.prompt_tokens - hit
    assert sc.hit_tokens == hit and sc.match_blocks == blocks
    assert sc.ttft == pytest.approx(W.ttft * (0.2 + uncached / 1000.0))
    cost = (uncached * 1.0 + hit * 0.1 + 100 * 2.0) / 1e6
    assert sc.cost_usd == pytest.approx(cost)
    assert sc.cost == pytest.approx(W.cost * cost * 100)


def test_cost_uses_expected_output_tokens() -> None:
    ep = cloud()
    f = features(chat("hi"))  # no max_tokens: the configured expectation (256)
    sc = score_candidate(ep, f, StaticSnapshot(endpoints=(ep,)), W)
    assert f.expected_output_tokens == RoutingConfig().expected_output_tokens == 256
    assert sc.cost_usd == pytest.approx((f.prompt_tokens * 1.0 + 256 * 2.0) / 1e6)


def test_decode_term() -> None:
    ep = cloud()
    sc = score_candidate(ep, features(LONG), StaticSnapshot(endpoints=(ep,)), W)
    assert sc.decode == pytest.approx(W.decode * 100 / 50.0) and sc.decode_tps == pytest.approx(50.0)


def test_load_term_for_slots_and_for_elastic_endpoints() -> None:
    eng, cl = local("l-0", slots=4, **PRIOR), cloud()
    snap = StaticSnapshot(endpoints=(eng, cl), inflights={"l-0": 2, "c/m": 8})
    f = features(LONG)
    assert score_candidate(eng, f, snap, W).load == pytest.approx(W.load * 2 / 4)
    assert score_candidate(cl, f, snap, W).load == pytest.approx(W.load * 8 / CLOUD_SLOTS)


def test_queue_term_prefill_ahead_and_waiting_for_a_slot() -> None:
    eng = local("l-0", slots=2, **PRIOR)
    f = features(LONG)
    idle = StaticSnapshot(endpoints=(eng,))
    assert score_candidate(eng, f, idle, W).queue == 0.0
    free = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}, pending={"l-0": 700})
    assert score_candidate(eng, f, free, W).queue == pytest.approx(W.ttft * 700 / 1000.0)
    busy = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 3}, pending={"l-0": 700})
    sc = score_candidate(eng, f, busy, W)
    decode_s = 100 / 50.0
    expected = 700 / 1000.0 + (3 - 2 + 1) * decode_s / 2
    assert sc.queue == pytest.approx(W.ttft * expected)
    assert sc.ttft_s == pytest.approx(0.2 + f.prompt_tokens / 1000.0 + expected)
    # Elastic (cloud) endpoints: their queueing is in the observed TTFT, not modelled.
    cl = cloud()
    assert score_candidate(cl, f, StaticSnapshot(endpoints=(cl,), inflights={"c/m": 50}, pending={"c/m": 10**6}), W).queue == 0.0


def test_quality_multiplier_from_probes_and_config() -> None:
    ep = cloud(quality=0.8)
    snap = StaticSnapshot(endpoints=(ep,), qualities={ep.id: 0.5})
    sc = score_candidate(ep, features(LONG), snap, W)
    base = sc.ttft + sc.queue + sc.work + sc.cost + sc.decode + sc.load
    assert sc.quality_mult == pytest.approx(0.4)
    assert sc.score == pytest.approx(base / 0.4)
    assert sc.quality == pytest.approx(base / 0.4 - base)
    healthy = score_candidate(cloud(), features(LONG), StaticSnapshot(endpoints=(cloud(),)), W)
    assert healthy.quality == 0.0


def test_work_term_for_self_hosted_endpoints_only() -> None:
    eng, cl = local("l-0", slots=4, **PRIOR), cloud()
    f = features(LONG)
    snap = StaticSnapshot(endpoints=(eng, cl), matches={"l-0": 10})
    sc = score_candidate(eng, f, snap, W)
    assert sc.work == pytest.approx(W.work * (f.prompt_tokens - sc.hit_tokens) / 1000.0) and sc.hit_tokens > 0
    assert score_candidate(cl, f, snap, W).work == 0.0


def test_score_is_the_sum_of_the_terms() -> None:
    eng = local("l-0", slots=1, **PRIOR)
    snap = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}, pending={"l-0": 100}, matches={"l-0": 5}, qualities={"l-0": 0.9})
    sc = score_candidate(eng, features(LONG), snap, W)
    assert set(sc.terms) == set(TERMS) - {"home"}
    assert sc.score == pytest.approx(sum(sc.terms.values()))


def test_home_bonus_on_a_cold_miss() -> None:
    a, b = local("l-0", **PRIOR), local("l-1", **PRIOR)
    f = features(LONG)
    cfg = RoutingConfig(weights=W)
    decision = choose([a, b], StaticSnapshot(endpoints=(a, b)), f, cfg, random.Random(0))
    home = next(sc for sc in decision.ranked if sc.endpoint.id == decision.home)
    assert home.home == pytest.approx(-W.home * W.ttft * f.prompt_tokens / 1000.0)
    assert decision.chosen is home and "home" in home.terms
    assert home.score == pytest.approx(sum(home.terms.values()))
    # Not a cold miss once any candidate holds a block of the prompt: no bonus.
    warm = choose([a, b], StaticSnapshot(endpoints=(a, b), matches={"l-1": 1}), f, cfg, random.Random(0))
    assert warm.home is None and all(sc.home == 0 for sc in warm.ranked)


def test_evict_term_prices_the_risk_of_an_over_committed_cache() -> None:
    eng, cl = local("l-0", slots=4, **PRIOR), cloud()
    f = features(LONG)
    w = Weights(evict=2.0, reuse_s=60.0)
    snap = StaticSnapshot(endpoints=(eng, cl), matches={"l-0": 10}, residences={"l-0": 15.0, "c/m": 15.0})
    sc = score_candidate(eng, f, snap, w)
    uncached = f.prompt_tokens - sc.hit_tokens
    # The prompt it leaves for its next turn plus the tokens it writes over others', each lost
    # with the chance that the cache drops a block sooner than the typical reuse gap.
    assert sc.evict == pytest.approx(2.0 * (f.prompt_tokens + uncached) / 1000.0 * (1 - 15.0 / 60.0))
    assert sc.score == pytest.approx(sum(sc.terms.values()))
    # A cache whose blocks outlive the reuse gap, one with room (None), a cloud endpoint: no risk.
    assert score_candidate(eng, f, StaticSnapshot(endpoints=(eng,), residences={"l-0": 90.0}), w).evict == 0.0
    assert score_candidate(eng, f, StaticSnapshot(endpoints=(eng,)), w).evict == 0.0
    assert score_candidate(cl, f, snap, w).evict == 0.0
    assert score_candidate(eng, f, snap, Weights(evict=0.0)).evict == 0.0


class _Report:
    def __init__(self, processing: int, deferred: int, kv_usage: float) -> None:
        self.processing, self.deferred, self.kv_usage = processing, deferred, kv_usage


def test_an_engines_own_queue_counts_as_in_flight() -> None:
    # llama-server's /metrics sees requests this gateway did not send (another gateway's) and
    # those waiting for a slot: the queue and load terms use them when they exceed the local count.
    eng = local("l-0", slots=2, **PRIOR)
    f = features(LONG)
    quiet = score_candidate(eng, f, StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}), W)
    busy_snap = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}, reported_loads={"l-0": _Report(2, 3, 0.1)})
    busy = score_candidate(eng, f, busy_snap, W)
    decode_s = f.expected_output_tokens / 50.0
    assert busy.inflight == 5.0 and quiet.inflight == 1.0
    assert quiet.queue == 0.0
    assert busy.queue == pytest.approx(W.ttft * (5 - 2 + 1) * decode_s / 2)
    assert busy.load == pytest.approx(W.load * 5 / 2)
    # The local count wins when it is the larger (requests admitted, not yet at the engine).
    behind = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 3}, reported_loads={"l-0": _Report(1, 0, 0.0)})
    assert score_candidate(eng, f, behind, W).inflight == 3.0


def test_an_engines_kv_usage_raises_its_load_term() -> None:
    eng = local("l-0", slots=4, **PRIOR)
    f = features(LONG)
    snap = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}, reported_loads={"l-0": _Report(1, 0, 0.9)})
    assert score_candidate(eng, f, snap, W).load == pytest.approx(W.load * 0.9)
    low = StaticSnapshot(endpoints=(eng,), inflights={"l-0": 1}, reported_loads={"l-0": _Report(1, 0, 0.1)})
    assert score_candidate(eng, f, low, W).load == pytest.approx(W.load * 1 / 4)
    # A cloud endpoint has no slots: nothing it could report is used.
    cl = cloud()
    cloud_snap = StaticSnapshot(endpoints=(cl,), reported_loads={cl.id: _Report(50, 50, 1.0)})
    assert score_candidate(cl, f, cloud_snap, W).load == 0.0
