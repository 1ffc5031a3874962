import numpy as np
import pytest

from probes.stats.permutation import p_value, permutation_test, permuted_labels


def test_p_value_counts_ties_and_adds_one():
    assert p_value(2.0, np.array([1.0, 2.0, 3.0])) == pytest.approx(3 / 4)
    assert p_value(10.0, np.zeros(99)) == pytest.approx(1 / 100)


def test_p_value_treats_last_bit_differences_as_ties():
    assert p_value(0.3, np.array([0.1 + 0.2])) == pytest.approx(1.0)


def test_permuted_labels_keep_counts_within_strata():
    rng = np.random.default_rng(1)
    labels = np.array([True, False, True, False, False, True, True, False])
    strata = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    rows = permuted_labels(labels, 200, rng, strata=strata)
    assert rows.shape == (200, 8)
    assert (rows[:, :4].sum(axis=1) == 2).all()
    assert (rows[:, 4:].sum(axis=1) == 2).all()
    # Rows really vary (not the identity every time).
    assert len({tuple(r) for r in rows}) > 10


def test_permuted_labels_reject_mismatched_strata():
    with pytest.raises(ValueError):
        permuted_labels(np.zeros(4, bool), 3, np.random.default_rng(0), strata=np.zeros(3))


def _mean_gap(values):
    return lambda lab: np.abs(lab @ values / lab.sum(1) - (1 - lab) @ values / (1 - lab).sum(1))


def test_null_p_values_are_uniform_enough():
    rng = np.random.default_rng(7)
    alpha, trials = 0.05, 600
    rejections = 0
    for _ in range(trials):
        values = rng.normal(size=30)
        labels = (np.arange(30) < 15).astype(float)
        _, p, null = permutation_test(_mean_gap(values), labels, 199, rng)
        assert null.shape == (199,)
        rejections += p <= alpha
    fpr = rejections / trials
    se = np.sqrt(alpha * (1 - alpha) / trials)
    assert alpha - 3.5 * se < fpr < alpha + 3.5 * se


def test_detects_a_shift():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(1.5, 1, 25), rng.normal(0, 1, 25)])
    labels = (np.arange(50) < 25).astype(float)
    observed, p, _ = permutation_test(_mean_gap(values), labels, 999, rng)
    assert observed > 0.8
    assert p < 0.01


def test_many_permutations_are_drawn_in_chunks_each_within_its_strata():
    """A confirmatory round's 200,000 permutations: evaluated CHUNK rows at a time, all counted."""
    from probes.stats import permutation

    labels = np.array([True, False, True, False, False, True, True, False])
    strata = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    sizes: list[int] = []

    def statistic(rows: np.ndarray) -> np.ndarray:
        sizes.append(rows.shape[0])
        assert (rows[:, :4].sum(axis=1) == 2).all() and (rows[:, 4:].sum(axis=1) == 2).all()
        return rows[:, 0].astype(float) + rows[:, 5]

    n = 2 * permutation.CHUNK + 7
    observed, p, null = permutation_test(statistic, labels, n, np.random.default_rng(0), strata=strata)
    assert sizes == [1, permutation.CHUNK, permutation.CHUNK, 7] and null.size == n
    # Both marked labels keep their place with probability 1/2 * 1/2.
    assert observed == 2.0 and p == pytest.approx(0.25, abs=0.01)


def test_one_chunk_draws_what_a_single_call_draws():
    labels = np.arange(10) < 4
    rows = permuted_labels(labels, 500, np.random.default_rng(3))
    _, _, null = permutation_test(lambda r: r[:, 0].astype(float), labels, 500, np.random.default_rng(3))
    assert (null == rows[:, 0]).all()
