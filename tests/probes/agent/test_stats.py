from __future__ import annotations

import math

import pytest

from probes.agent.stats import fisher_less, wilson_interval


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_narrows_with_more_samples() -> None:
    small, large = wilson_interval(5, 10), wilson_interval(500, 1000)
    assert small[0] < large[0] < 0.5 < large[1] < small[1]


def test_fisher_matches_a_hand_computed_table() -> None:
    # 1/4 vs 4/4: P(X <= 1) with margins (5 passes of 8, 4 drawn) = (C(5,1)C(3,3)) / C(8,4) = 5/70.
    assert fisher_less(1, 4, 4, 4) == pytest.approx(5 / 70)


def test_fisher_sums_to_one_over_all_tables() -> None:
    # P(X <= k) at the largest possible k is 1; the point masses sum to 1.
    assert fisher_less(6, 10, 3, 12) <= 1.0
    masses = [fisher_less(k, 10, 9 - k, 12) - (fisher_less(k - 1, 10, 10 - k, 12) if k else 0) for k in range(10)]
    assert math.isclose(fisher_less(9, 10, 0, 12), 1.0)
    assert all(m >= -1e-12 for m in masses) and math.isclose(sum(masses), 1.0)


def test_fisher_direction() -> None:
    assert fisher_less(2, 20, 16, 20) < 0.001
    assert fisher_less(16, 20, 2, 20) > 0.99
    assert fisher_less(0, 0, 5, 10) == 1.0
