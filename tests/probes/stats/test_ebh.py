"""e-BH against hand-computed cases, then its FDR bound in a simulation with valid e-values."""

from __future__ import annotations

import numpy as np
import pytest

from probes.stats.ebh import ebh, self_consistent
from probes.stats.evalues import calibrate


def test_hand_computed_cases() -> None:
    # n = 4, alpha = 0.1: the bars are n/(alpha k) = 40, 20, 13.3, 10 for k = 1..4.
    e = {"a": 50.0, "b": 25.0, "c": 5.0, "d": 0.2}
    out = ebh(e, 0.1)
    assert (out.rejected, out.k, out.n, out.threshold) == (("a", "b"), 2, 4, 20.0)
    # k is the largest that qualifies, even when a smaller k does not: e_(3) = 14 >= 13.3.
    assert ebh({"a": 15.0, "b": 15.0, "c": 14.0, "d": 0.0}, 0.1).rejected == ("a", "b", "c")
    # None reaches 40: nothing rejected (and the bar reported is the single-rejection one).
    none = ebh({"a": 39.9, "b": 19.0, "c": 13.0, "d": 9.9}, 0.1)
    assert (none.rejected, none.k, none.threshold) == ((), 0, 40.0)
    # Every e at its bar: all rejected (>= is inclusive).
    assert ebh({"a": 10.0, "b": 10.0, "c": 10.0, "d": 10.0}, 0.1).k == 4


def test_hypotheses_without_evidence_count_in_n() -> None:
    assert ebh({"a": 50.0}, 0.1).rejected == ("a",)  # n = 1: the bar is 10
    assert ebh({"a": 50.0}, 0.1, n=10).rejected == ()  # n = 10: the bar is 100
    assert ebh({"a": 100.0}, 0.1, n=10).rejected == ("a",)


def test_self_consistency_of_a_set_built_one_rejection_at_a_time() -> None:
    # n = 10, alpha = 0.1: a rejected set of k needs every member at e >= 100 / k.
    assert self_consistent({}, 0.1, 10)
    assert not self_consistent({"b": 60.0}, 0.1, 10)  # 60 < 100
    assert self_consistent({"c": 120.0, "a": 60.0}, 0.1, 10)  # both >= 50
    assert not self_consistent({"c": 120.0, "a": 49.0}, 0.1, 10)
    assert self_consistent({"c": 120.0, "a": 60.0, "b": 100 / 3}, 0.1, 10)
    # e-BH's set is self-consistent, and holds every self-consistent set (it is the largest).
    rng = np.random.default_rng(3)
    for _ in range(200):
        e = {f"h{i}": float(x) for i, x in enumerate(np.exp(rng.uniform(0, 6, size=8)))}
        out = ebh(e, 0.1, 12)
        assert self_consistent({h: e[h] for h in out.rejected}, 0.1, 12)
        subset = {h: v for h, v in e.items() if rng.random() < 0.5}
        if self_consistent(subset, 0.1, 12):
            assert set(subset) <= set(out.rejected)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        ebh({"a": 1.0}, 0.0)
    with pytest.raises(ValueError):
        ebh({"a": -1.0}, 0.1)
    with pytest.raises(ValueError):
        ebh({"a": float("nan")}, 0.1)


def test_fdr_is_controlled_in_a_simulation() -> None:
    """20 endpoints a round, 5 faulty (p-values near 0), 15 honest (uniform p), e = calibrated p:
    the mean false discovery proportion over 2000 rounds stays below alpha * n0 / n, and and the faulty
    ones are found."""
    rng = np.random.default_rng(22)
    alpha, n, faulty = 0.1, 20, 5
    fdp, power = [], []
    for _ in range(2000):
        p = np.concatenate([rng.uniform(size=n - faulty), rng.uniform(size=faulty) * 1e-6])
        e = {f"ep{i}": calibrate(float(pi), 0.5) for i, pi in enumerate(p)}
        out = ebh(e, alpha)
        false = sum(int(name[2:]) < n - faulty for name in out.rejected)
        fdp.append(false / max(1, out.k))
        power.append((out.k - false) / faulty)
    bound = alpha * (n - faulty) / n
    assert float(np.mean(fdp)) <= bound, (np.mean(fdp), bound)
    assert float(np.mean(power)) >= 0.95
    # All honest: the chance of any rejection (the FWER, which FDR equals here) stays below alpha.
    any_false = 0
    for _ in range(2000):
        e = {f"ep{i}": calibrate(float(pi), 0.5) for i, pi in enumerate(rng.uniform(size=n))}
        any_false += ebh(e, alpha).k > 0
    assert any_false / 2000 <= alpha
