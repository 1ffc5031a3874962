import time

import numpy as np
import pytest

from probes.stats.mmd import encode, hamming_kernel, mmd2, mmd_test

ALPHABET = np.array(list("abcdefgh "))


def _texts(rng, probs, n, length=12):
    return ["".join(rng.choice(ALPHABET, size=length, p=probs)) for _ in range(n)]


def _pool(rng, prompt_probs, per_prompt):
    texts, prompts = [], []
    for i, probs in enumerate(prompt_probs):
        texts += _texts(rng, probs, per_prompt)
        prompts += [i] * per_prompt
    return texts, prompts


def _random_probs(rng, prompts):
    return [rng.dirichlet(np.ones(ALPHABET.size)) for _ in range(prompts)]


def test_encode_pads_and_cuts():
    codes = encode(["ab", "abcd", ""], max_chars=3)
    assert codes.shape == (3, 3)
    assert codes[0].tolist() == [97, 98, -1]
    assert codes[1].tolist() == [97, 98, 99]
    assert (codes[2] == -1).all()


def test_kernel_is_normalised_hamming():
    kernel = hamming_kernel(encode(["abcd", "abxx", "zz"], 10))
    assert np.diag(kernel).tolist() == [1.0, 1.0, 1.0]
    assert kernel[0, 1] == pytest.approx(0.5)
    assert kernel[0, 2] == 0.0  # "zz" + pads share nothing with "abcd"
    assert np.allclose(kernel, kernel.T)


def test_pads_match_pads():
    kernel = hamming_kernel(encode(["ab", "ax", "abcd"], 10))
    assert kernel[0, 1] == pytest.approx(3 / 4)  # a, and two pads


def test_identical_samples_sit_below_zero_and_pass():
    rng = np.random.default_rng(4)
    texts = ["aaaa", "aaab", "bbbb", "bbba"]
    outcome = mmd_test(texts, [0, 0, 1, 1], texts, [0, 0, 1, 1], max_chars=10, permutations=50, rng=rng)
    assert outcome.statistic < 0
    assert outcome.p_value == 1.0


def test_mmd2_matches_the_unbiased_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 3))
    kernel = np.exp(-((x[:, None] - x[None]) ** 2).sum(-1))
    labels = np.array([True, True, True, False, False, False, False])
    p, q = np.flatnonzero(labels), np.flatnonzero(~labels)
    kpp = kernel[np.ix_(p, p)]
    kqq = kernel[np.ix_(q, q)]
    expected = (
        (kpp.sum() - np.trace(kpp)) / (3 * 2)
        + (kqq.sum() - np.trace(kqq)) / (4 * 3)
        - 2 * kernel[np.ix_(p, q)].mean()
    )
    assert mmd2(kernel, labels[None])[0] == pytest.approx(expected)


def test_detects_a_different_model():
    rng = np.random.default_rng(1)
    honest = _random_probs(rng, 5)
    other = _random_probs(rng, 5)
    sample, sp = _pool(rng, other, 10)
    reference, rp = _pool(rng, honest, 10)
    outcome = mmd_test(sample, sp, reference, rp, max_chars=100, permutations=500, rng=rng)
    assert outcome.p_value < 0.01
    assert outcome.statistic > 0
    assert set(outcome.details["per_prompt"]) == {0, 1, 2, 3, 4}
    assert outcome.samples == 50 and outcome.reference_samples == 50


def test_statistic_is_unbiased_under_the_null():
    rng = np.random.default_rng(6)
    probs = _random_probs(rng, 5)
    values = []
    for _ in range(200):
        sample, sp = _pool(rng, probs, 4)
        reference, rp = _pool(rng, probs, 4)
        values.append(mmd_test(sample, sp, reference, rp, max_chars=50, permutations=1, rng=rng).statistic)
    assert abs(np.mean(values)) < 3 * np.std(values) / np.sqrt(len(values))


def test_prompts_with_too_few_completions_are_left_out():
    rng = np.random.default_rng(7)
    outcome = mmd_test(["a", "b", "c"], [0, 0, 1], ["a", "b", "c"], [0, 0, 1], max_chars=5, permutations=10, rng=rng)
    assert outcome.details["prompts_compared"] == 1
    assert set(outcome.details["per_prompt"]) == {0}
    nothing = mmd_test(["a", "b"], [0, 1], ["a", "b"], [0, 1], max_chars=5, permutations=10, rng=rng)
    assert nothing.p_value is None


def test_null_false_positive_rate_is_near_alpha():
    rng = np.random.default_rng(5)
    alpha, trials = 0.05, 300
    probs = _random_probs(rng, 4)
    rejected = 0
    for _ in range(trials):
        sample, sp = _pool(rng, probs, 6)
        reference, rp = _pool(rng, probs, 6)
        rejected += mmd_test(sample, sp, reference, rp, max_chars=50, permutations=99, rng=rng).p_value <= alpha
    se = np.sqrt(alpha * (1 - alpha) / trials)
    assert alpha - 3.5 * se < rejected / trials < alpha + 3.5 * se


def test_rejects_completions_without_prompts():
    with pytest.raises(ValueError):
        mmd_test(["a"], [], ["a", "b"], [0, 0], max_chars=5, permutations=10, rng=np.random.default_rng(0))


def test_thousand_permutations_at_250_per_side_are_fast():
    rng = np.random.default_rng(2)
    probs = _random_probs(rng, 25)
    sample, sp = _pool(rng, probs, 10)
    reference, rp = _pool(rng, probs, 10)
    sample = [s * 80 for s in sample]  # ~1000 characters each
    reference = [s * 80 for s in reference]
    start = time.process_time()
    mmd_test(sample, sp, reference, rp, max_chars=1000, permutations=1000, rng=rng)
    assert time.process_time() - start < 5.0
