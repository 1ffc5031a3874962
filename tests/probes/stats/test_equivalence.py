import pytest

from probes.base import Outcome
from probes.stats.equivalence import beyond_margin, conformal_margin


def _outcome(stats, p=0.001):
    prompts = {f"p{i}": {"statistic": s, "p_value": p} for i, s in enumerate(stats)}
    return Outcome(statistic=max(stats), p_value=min(1.0, p * len(stats)), details={"prompts": prompts})


def test_margin_is_the_conformal_order_statistic():
    values = [float(v) for v in range(1, 200)]  # n = 199: rank ceil(0.99 * 200) = 198
    margin = conformal_margin(values, 0.01)
    assert (margin.value, margin.n) == (198.0, 199)
    assert margin.bound == pytest.approx(1 - 198 / 200)
    assert margin.bound <= 0.01


def test_too_few_values_give_the_largest_and_say_how_much_less_it_supports():
    margin = conformal_margin([0.3, 0.0, 0.1], 0.01, "cal.json")
    assert margin.value == 0.3
    assert margin.bound == pytest.approx(1 / 4)  # the claim the calibration supports, not the one asked for
    assert margin.source == "cal.json"


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        conformal_margin([], 0.01)
    with pytest.raises(ValueError):
        conformal_margin([0.1], 0.0)


def test_an_honest_like_gap_passes_even_at_the_equality_tests_floor():
    margin = conformal_margin([0.0, 0.05, 0.09], 0.01)
    equality = _outcome([0.06, 0.08, 0.09])  # every prompt differs (p at its floor), none past the margin
    judged = beyond_margin(equality, margin)
    assert judged.p_value == 1.0
    assert judged.details["beyond_margin"] == []
    assert judged.details["equality_p_value"] == equality.p_value
    # Its values are per comparison (each pair's largest statistic): no union bound over prompts.
    assert judged.details["false_positive_rate"] == pytest.approx(margin.bound)
    assert judged.statistic == equality.statistic


def test_a_fault_like_gap_fails_with_the_permutation_p_of_the_prompts_beyond():
    margin = conformal_margin([0.0, 0.05, 0.09], 0.01)
    prompts = {"a": {"statistic": 0.7, "p_value": 0.002}, "b": {"statistic": 0.05, "p_value": 0.001}}
    judged = beyond_margin(Outcome(statistic=0.7, p_value=0.002, details={"prompts": prompts}), margin)
    assert judged.details["beyond_margin"] == ["a"]
    assert judged.p_value == pytest.approx(2 * 0.002)  # Bonferroni over both prompts


def test_a_gap_past_the_margin_that_is_sampling_noise_does_not_fail():
    margin = conformal_margin([0.0, 0.09], 0.01)
    judged = beyond_margin(_outcome([0.5, 0.01], p=0.4), margin)
    assert judged.details["beyond_margin"] == ["p0"]
    assert judged.p_value == pytest.approx(0.8)


def test_an_untested_outcome_is_left_as_it_is():
    untested = Outcome(statistic=0.0, details={"prompts": {}})
    assert beyond_margin(untested, conformal_margin([0.1], 0.01)) is untested
