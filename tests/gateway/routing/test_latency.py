"""Decaying latency statistics: bands, percentiles, the TTFT fit, priors and pooling."""

from __future__ import annotations

import pytest

from gateway.routing.latency import (
    CLOUD_PRIOR,
    EDGES,
    ENGINE_PRIOR,
    LatencyModel,
    Prior,
    band_of,
)
from gateway.routing.settings import LatencySettings

CFG = LatencySettings(half_life_s=100.0, bands=(512, 2048, 8192), prior_weight=3.0)


def model(*endpoints: str, explicit: dict[str, Prior] | None = None) -> LatencyModel:
    m = LatencyModel(CFG)
    for e in endpoints:
        prior = (explicit or {}).get(e, CLOUD_PRIOR)
        m.configure(e, "m", prior, explicit=e in (explicit or {}))
    return m


def test_bands() -> None:
    assert [band_of(t, CFG.bands) for t in (0, 512, 513, 2048, 5000, 10**6)] == [0, 0, 1, 1, 2, 3]


def test_no_data_predicts_the_prior() -> None:
    m = model("a")
    s = m.summary("a")
    assert s.ttft(0) == pytest.approx(CLOUD_PRIOR.ttft_s)
    assert s.ttft(8000) == pytest.approx(CLOUD_PRIOR.ttft_s + 8000 / CLOUD_PRIOR.prefill_tps)
    assert s.decode_tps == pytest.approx(CLOUD_PRIOR.decode_tps)


def test_band_mean_and_percentiles() -> None:
    m = model("a")
    for ttft in [0.1] * 8 + [1.0] * 2:
        m.observe("a", 300, ttft, None)
    m.refresh()
    s = m.summary("a")
    assert s.band_weight[0] == pytest.approx(10)
    # The only endpoint of its model: its pool is itself, so it predicts its own band mean.
    assert s.ttft(300) == pytest.approx(0.28)
    assert 0.07 <= s.band_p50[0] <= 0.11  # histogram resolution: sqrt(2) buckets
    assert 0.7 <= s.band_p90[0] <= 1.3
    assert s.p90(100) == s.band_p90[0]


def test_fit_learns_the_prefill_rate_from_several_sizes() -> None:
    m = model("a")
    for u in (200, 1000, 4000, 16000):
        for _ in range(20):
            m.observe("a", u, 0.05 + u / 2000.0, 80.0)
    m.refresh()
    s = m.summary("a")
    assert s.b == pytest.approx(1 / 2000.0, rel=0.1)
    assert s.a == pytest.approx(0.05, abs=0.05)
    assert s.ttft(8000) == pytest.approx(0.05 + 4.0, rel=0.1)
    assert s.decode_tps == pytest.approx(80.0, rel=0.05)


def test_an_unobserved_endpoint_predicts_like_its_peers() -> None:
    m = model("seen", "unseen")
    for _ in range(5):
        m.observe("seen", 100, 0.002, 500.0)
    m.refresh()
    seen, unseen = m.summary("seen"), m.summary("unseen")
    assert unseen.ttft(100) == pytest.approx(seen.ttft(100), rel=1e-6)
    assert unseen.decode_tps == pytest.approx(seen.decode_tps, rel=1e-6)


def test_own_samples_outweigh_the_pool() -> None:
    m = model("fast", "slow")
    for _ in range(30):
        m.observe("fast", 300, 0.1, None)
        m.observe("slow", 300, 0.9, None)
    m.refresh()
    assert m.summary("fast").ttft(300) == pytest.approx((30 * 0.1 + 3 * 0.5) / 33, rel=1e-6)
    assert m.summary("slow").ttft(300) == pytest.approx((30 * 0.9 + 3 * 0.5) / 33, rel=1e-6)


def test_explicit_priors_are_not_pooled() -> None:
    m = model("seen", "configured", explicit={"configured": ENGINE_PRIOR})
    m.observe("seen", 100, 3.0, None)
    m.refresh()
    assert m.summary("configured").ttft(0) == pytest.approx(ENGINE_PRIOR.ttft_s)


def test_summaries_change_only_on_refresh() -> None:
    m = model("a")
    before = m.summary("a").ttft(100)
    m.observe("a", 100, 5.0, None)
    assert m.summary("a").ttft(100) == before  # the decision path reads prebuilt summaries
    m.refresh()
    assert m.summary("a").ttft(100) > before


def test_pending_deltas_adopt_and_fold() -> None:
    m = model("a")
    m.observe("a", 100, 0.5, 50.0)
    deltas = m.take_pending()
    assert deltas["a"]["n0"] == 1.0 and deltas["a"]["dw"] == 1.0 and deltas["a"]["u0"] == 100.0
    assert m.take_pending() == {}
    # The store was away: fold keeps them visible locally.
    m.fold(deltas, now=0.0)
    m.refresh()
    assert m.summary("a").band_weight[0] == pytest.approx(1.0)
    # The shared view replaces the base (it includes what was pushed).
    m.adopt({"a": {"n0": 4.0, "s0": 2.0, "u0": 400.0, "fw": 4.0, "fu": 400.0, "ft": 2.0, "fuu": 40000.0, "fut": 200.0}}, now=1.0)
    m.refresh()
    assert m.summary("a").band_weight[0] == 4.0 and m.summary("a").samples == 4.0


def test_fold_decays_the_base() -> None:
    m = model("a")
    m.fold({"a": {"n0": 4.0}}, now=0.0)
    m.fold({"a": {"n0": 0.0}}, now=100.0)  # one half-life later
    assert m.raw("a")["n0"] == pytest.approx(2.0)


def test_histogram_edges() -> None:
    assert EDGES[0] == 0.005 and EDGES[-1] > 10
