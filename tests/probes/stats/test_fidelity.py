import math

import numpy as np
import pytest

from probes.stats.fidelity import OTHER, estimate_temperature, fidelity_test, implied_distribution, pooled_cells


def _top(rng, vocab=200, k=20, scale=1.5):
    logits = rng.normal(0, scale, vocab)
    lp = logits - np.log(np.exp(logits).sum())
    order = np.argsort(lp)[::-1]
    return {f"t{i}": float(lp[i]) for i in order[:k]}, lp


def _sample(rng, lp, temperature, n):
    z = lp / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    draws = rng.choice(lp.size, size=n, p=p)
    counts: dict[str, int] = {}
    for d in draws:
        counts[f"t{d}"] = counts.get(f"t{d}", 0) + 1
    return counts


def test_implied_distribution_at_t1_is_the_reported_one():
    top = {"a": math.log(0.5), "b": math.log(0.3)}
    q = implied_distribution(top, 1.0)
    assert q == pytest.approx({"a": 0.5, "b": 0.3, OTHER: 0.2})


def test_away_from_t1_the_distribution_is_conditional_on_the_top_k():
    top = {"a": math.log(0.5), "b": math.log(0.3)}
    q = implied_distribution(top, 0.5)
    assert OTHER not in q
    assert q["a"] / q["b"] == pytest.approx((0.5 / 0.3) ** 2)
    assert sum(q.values()) == pytest.approx(1.0)


def test_away_from_t1_samples_outside_the_top_k_are_not_tested():
    top = {"a": math.log(0.5), "b": math.log(0.3)}
    outcome = fidelity_test({"a": 60, "b": 40, "zz": 30}, top, 0.8)
    assert outcome.samples == 100
    assert outcome.details["outside_top_k"] == 30
    assert {c["token"] for c in outcome.details["cells"]} == {"a", "b"}


def test_estimate_needs_two_tokens():
    assert estimate_temperature({"a": 10, "zz": 5}, {"a": -0.1, "b": -3.0}) is None


def test_small_cells_are_pooled_into_other():
    labels, obs, exp = pooled_cells(
        {"a": 50, "b": 3, "c": 5, OTHER: 1}, {"a": 50.0, "b": 3.0, "c": 4.0, OTHER: 1.0}, 5.0
    )
    assert labels == ["a", OTHER]
    assert obs.tolist() == [50, 9]
    assert exp.tolist() == [50.0, 8.0]


def test_a_pool_still_too_small_merges_with_the_smallest_cell():
    labels, obs, exp = pooled_cells(
        {"a": 60, "b": 30, "c": 8, OTHER: 2}, {"a": 60.0, "b": 30.0, "c": 8.0, OTHER: 2.0}, 5.0
    )
    assert labels == ["a", "b", OTHER]
    assert exp.tolist() == [60.0, 30.0, 10.0]
    assert obs.tolist() == [60, 30, 10]


def test_one_cell_gives_no_p_value():
    outcome = fidelity_test({"a": 200}, {"a": math.log(0.999)}, 1.0)
    assert outcome.p_value is None
    assert outcome.samples == 200


def test_tokens_outside_top_k_count_as_other():
    top = {"a": math.log(0.5), "b": math.log(0.3)}
    outcome = fidelity_test({"a": 50, "b": 30, "zz": 20}, top, 1.0)
    cells = {c["token"]: c for c in outcome.details["cells"]}
    assert cells[OTHER]["observed"] == 20
    assert outcome.p_value == pytest.approx(1.0)


def test_null_false_positive_rate_is_near_alpha():
    rng = np.random.default_rng(3)
    alpha, trials = 0.05, 600
    top, lp = _top(rng)
    rejected = sum(fidelity_test(_sample(rng, lp, 1.0, 200), top, 1.0).p_value <= alpha for _ in range(trials))
    se = np.sqrt(alpha * (1 - alpha) / trials)
    # chi-square is asymptotic: allow a little more room above alpha.
    assert alpha - 3.5 * se < rejected / trials < alpha + 4 * se


def test_a_served_temperature_of_0_7_is_caught_and_estimated():
    rng = np.random.default_rng(4)
    top, lp = _top(rng)
    outcomes = [fidelity_test(_sample(rng, lp, 0.7, 200), top, 1.0) for _ in range(100)]
    power = np.mean([o.p_value <= 0.01 for o in outcomes])
    assert power >= 0.95
    estimates = [o.details["temperature_estimate"] for o in outcomes]
    assert 0.6 < float(np.median(estimates)) < 0.8


@pytest.mark.parametrize("temperature", [0.5, 1.3, 2.0])
def test_estimate_temperature_recovers_it(temperature):
    rng = np.random.default_rng(5)
    top, lp = _top(rng)
    counts = _sample(rng, lp, temperature, 5000)
    assert estimate_temperature(counts, top) == pytest.approx(temperature, rel=0.1)


@pytest.mark.parametrize("temperature", [0.6, 1.5])
def test_null_calibration_away_from_t1(temperature):
    rng = np.random.default_rng(6)
    alpha, trials = 0.05, 400
    top, lp = _top(rng)
    rejected = sum(
        fidelity_test(_sample(rng, lp, temperature, 200), top, temperature).p_value <= alpha for _ in range(trials)
    )
    se = np.sqrt(alpha * (1 - alpha) / trials)
    assert alpha - 3.5 * se < rejected / trials < alpha + 4 * se
