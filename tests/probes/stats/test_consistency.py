"""The usage-consistency statistic: identical prompts counted differently, against a tolerant null."""

from __future__ import annotations

import numpy as np

from probes.stats.consistency import usage_consistency


def records(counts: dict[str, list[int | None]]) -> list[tuple[str, int | None]]:
    return [(fp, n) for fp, values in counts.items() for n in values]


def test_an_endpoint_that_always_counts_a_prompt_alike_passes() -> None:
    out = usage_consistency(records({"a": [30] * 10, "b": [41] * 10}), 0.01)
    assert out is not None
    assert (out.statistic, out.p_value, out.samples) == (0.0, 1.0, 20)
    assert out.details["mixed_counts"] == {}


def test_no_prompt_answered_twice_is_no_evidence() -> None:
    assert usage_consistency(records({"a": [30], "b": [31], "c": [32]}), 0.01) is None
    assert usage_consistency([], 0.01) is None


def test_prompts_answered_once_do_not_count_towards_n() -> None:
    out = usage_consistency(records({"a": [30, 30, 31], "b": [7]}), 0.01)
    assert out is not None and out.samples == 3 and out.details["off_count"] == 1


def test_a_quarter_of_requests_served_by_another_tokenizer_fails_far_below_alpha() -> None:
    # 4 prompts x 10 answers (the drift probe's window): ~a quarter counted by another model.
    out = usage_consistency(records({
        "a": [30] * 8 + [19] * 2, "b": [32] * 7 + [20] * 3, "c": [33] * 7 + [21] * 3, "d": [40] * 8 + [27] * 2,
    }), 0.01)
    assert out is not None
    assert out.details["off_count"] == 10 and out.p_value is not None and out.p_value < 1e-10
    assert out.details["mixed_counts"]["a"] == {"19": 2, "30": 8}


def test_one_odd_count_in_forty_is_within_the_tolerance() -> None:
    out = usage_consistency(records({"a": [30] * 9 + [31], "b": [32] * 10, "c": [33] * 10, "d": [40] * 10}), 0.01)
    assert out is not None and out.p_value is not None and out.p_value > 0.3


def test_the_p_value_holds_its_level_under_the_tolerated_noise() -> None:
    """Every request off its prompt's count with probability exactly the tolerance: rejections at
    alpha stay below alpha (the mode-based count is conservative)."""
    rng = np.random.default_rng(0)
    alpha, share, trials = 0.01, 0.01, 4000
    rejected = 0
    for _ in range(trials):
        rows = []
        for prompt in range(5):
            off = rng.random(40) < share
            rows += [(str(prompt), int(100 + prompt + (1 + rng.integers(3)) * o)) for o in off]
        out = usage_consistency(rows, share)
        assert out is not None and out.p_value is not None
        rejected += out.p_value <= alpha
    assert rejected / trials <= alpha


def test_a_fifty_fifty_split_counts_half_as_off() -> None:
    out = usage_consistency(records({"a": [10, 20] * 5}), 0.01)
    assert out is not None and out.details["off_count"] == 5 and out.statistic == 0.5


def test_an_answer_without_a_count_to_a_counted_prompt_is_off() -> None:
    """Review finding: leaving usage out of the substituted answers hid them (p = 1)."""
    out = usage_consistency(records({"a": [30] * 9 + [None] * 3, "b": [32] * 12}), 0.01)
    assert out is not None and out.details["off_count"] == 3 and out.p_value is not None and out.p_value < 0.01
    assert out.details["mixed_counts"]["a"] == {"30": 9, "None": 3}


def test_when_most_answers_carry_no_count_the_counted_ones_are_off() -> None:
    """Review finding: the usual value was taken among counts only, so 19 answers without usage
    and one with a count made 19 off (p = 2e-37) where one answer differed from the rest."""
    out = usage_consistency(records({"a": [None] * 19 + [30]}), 0.01)
    assert out is not None and out.details["off_count"] == 1
    assert out.p_value is not None and out.p_value > 0.1


def test_prompts_never_counted_are_no_evidence() -> None:
    assert usage_consistency(records({"a": [None] * 5}), 0.01) is None
