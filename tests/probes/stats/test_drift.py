import numpy as np
import pytest

from probes.stats.drift import drift_test, logprob_matrix, lt_statistic, prompt_test

VOCAB = [f"t{i}" for i in range(60)]


def _window(rng, logits, n, k=20, noise=0.05):
    """n responses: top-k logprobs of softmax(logits + per-response noise)."""
    out = []
    for _ in range(n):
        z = logits + rng.normal(0, noise, logits.size)
        lp = z - np.log(np.exp(z).sum())
        top = np.argsort(lp)[::-1][:k]
        out.append({VOCAB[i]: float(lp[i]) for i in top})
    return out


def test_missing_tokens_take_the_response_minimum():
    rows = logprob_matrix([{"a": -0.1, "b": -2.0}, {"a": -0.5, "c": -3.0}], ["a", "b", "c"])
    assert rows.tolist() == [[-0.1, -2.0, -2.0], [-0.5, -3.0, -3.0]]


def test_statistic_is_mean_absolute_gap_of_token_means():
    rows = np.array([[0.0, -1.0], [0.0, -3.0], [-1.0, -1.0], [-1.0, -1.0]])
    s = lt_statistic(rows, np.array([[True, True, False, False]]))
    # token 0: 0 vs -1 -> 1; token 1: -2 vs -1 -> 1
    assert s[0] == pytest.approx(1.0)


def test_identical_windows_pass():
    rng = np.random.default_rng(0)
    window = _window(rng, rng.normal(0, 2, 60), 1, noise=0)
    s, p = prompt_test(window * 10, window * 10, permutations=200, rng=rng)
    assert s == pytest.approx(0.0, abs=1e-12)
    assert p == 1.0


def test_shift_is_detected_and_reported_per_prompt():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, 60)
    shifted = logits + rng.normal(0, 0.3, 60)
    outcome = drift_test(
        {"x": _window(rng, shifted, 10), "y": _window(rng, logits, 10)},
        {"x": _window(rng, logits, 10), "y": _window(rng, logits, 10)},
        permutations=500,
        rng=rng,
    )
    prompts = outcome.details["prompts"]
    assert prompts["x"]["p_value"] < 0.01
    # Bonferroni over the two prompts.
    assert outcome.p_value == pytest.approx(min(1.0, 2 * min(v["p_value"] for v in prompts.values())))
    assert outcome.statistic == pytest.approx(prompts["x"]["statistic"])
    assert outcome.samples == 20 and outcome.reference_samples == 20


def test_no_common_prompt_gives_no_p_value():
    rng = np.random.default_rng(2)
    outcome = drift_test({"x": [{"a": -1.0}]}, {"y": [{"a": -1.0}]}, permutations=50, rng=rng)
    assert outcome.p_value is None


def test_null_false_positive_rate_is_at_most_alpha():
    rng = np.random.default_rng(11)
    alpha, trials = 0.05, 400
    logits = rng.normal(0, 2, 60)
    rejected = sum(
        drift_test({"x": _window(rng, logits, 10)}, {"x": _window(rng, logits, 10)}, permutations=199, rng=rng).p_value
        <= alpha
        for _ in range(trials)
    )
    se = np.sqrt(alpha * (1 - alpha) / trials)
    assert alpha - 3.5 * se < rejected / trials < alpha + 3.5 * se
