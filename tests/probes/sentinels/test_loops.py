import pytest

from probes.sentinels.loops import (
    LoopCell,
    is_loop,
    loop_plan,
    loop_test,
    reference_plan,
    repeated_ngram_ratio,
    repetition,
    tally,
)

TEST = {"floor": 0.002, "informative_below": 0.5, "alpha": 0.01}


def test_ngram_ratio_is_zero_without_repeats_and_high_for_a_loop():
    assert repeated_ngram_ratio("a b c d e".split(), 2) == 0.0
    assert repeated_ngram_ratio("a b a b a b".split(), 2) == pytest.approx(1 - 2 / 5)
    assert repeated_ngram_ratio(["a"], 3) == 0.0


def test_repetition_sees_loops_without_spaces():
    assert repetition("abcabcabcabcabcabcabcabcabc", word_n=3, char_n=6) > 0.7
    assert repetition("Monday, Tuesday, Wednesday, Thursday and Friday.", word_n=3, char_n=12) < 0.1


def test_repetition_sees_short_loops_and_spares_short_answers():
    # Answers of 10 tokens from the testbed's SmolLM2, looped after 2 tokens and honest.
    assert repetition("1.1.1.1.1.", word_n=3, char_n=12) > 0.5
    assert repetition("The daysThe daysThe daysThe daysThe days", word_n=3, char_n=12) > 0.5
    assert repetition("1. Bananas\n2. Apples\n3", word_n=3, char_n=12) < 0.2
    assert repetition("The days of the week are: Monday, Tuesday", word_n=3, char_n=12) < 0.2


def test_a_loop_needs_the_length_finish():
    text = "the end the end the end the end the end the end"
    assert is_loop(text, "length", threshold=0.5, word_n=3, char_n=12)
    assert not is_loop(text, "stop", threshold=0.5, word_n=3, char_n=12)
    assert not is_loop("a plain answer that was cut short by the limit", "length", threshold=0.5, word_n=3, char_n=12)


def test_a_few_loops_over_a_clean_reference_are_significant():
    observed = [LoopCell("p0@t0", 5, 100), LoopCell("p1@t0", 3, 50)]
    expected = {"p0@t0": LoopCell("p0@t0", 0, 1), "p1@t0": LoopCell("p1@t0", 0, 1)}
    out = loop_test(observed, expected, **TEST)
    assert out.details["finding"] == "loops"
    assert out.statistic == pytest.approx(8 / 150)
    assert out.p_value < 1e-6


def test_no_loops_is_clean_with_p_one():
    out = loop_test([LoopCell("p0@t0", 0, 100)], None, **TEST)
    assert out.details["finding"] == "clean" and out.p_value == 1.0


def test_one_loop_in_150_is_not_enough():
    out = loop_test([LoopCell("p0@t0", 1, 150)], None, **TEST)
    assert out.details["finding"] == "clean"
    assert out.p_value > TEST["alpha"]


def test_cells_where_the_reference_loops_are_left_out_and_shares_weight_the_null():
    observed = [LoopCell("p0@t0", 25, 25), LoopCell("p1@t0.8", 5, 25), LoopCell("p2@t0", 0, 25)]
    expected = {"p0@t0": LoopCell("p0@t0", 1, 1), "p1@t0.8": LoopCell("p1@t0.8", 5, 25), "p2@t0": LoopCell("p2@t0", 0, 1)}
    out = loop_test(observed, expected, **TEST)
    assert out.details["left_out"] == ["p0@t0"]
    assert out.details["null_share"] == pytest.approx(0.1)
    assert out.details["finding"] == "clean"


def test_plan_sends_repeats_at_t0_and_seeded_samples_and_the_reference_sends_t0_once():
    plan = loop_plan(["a", "b", "c"], repeats=4, sampled_prompts=2, samples=3, temperature=0.8, seed=7, max_tokens=16)
    assert len(plan) == 3 * 4 + 2 * 3
    seeds = [r.body["seed"] for r in plan if r.body["temperature"] > 0]
    assert seeds == [7, 8, 9, 7, 8, 9]
    ref = reference_plan(plan)
    assert len(ref) == 3 + 2 * 3
    assert [r.key for r in ref[:3]] == ["p0@t0", "p1@t0", "p2@t0"]


def test_tally_counts_per_cell_and_skips_failed_requests():
    plan = loop_plan(["a"], repeats=3, sampled_prompts=0, samples=0, temperature=0.8, seed=0, max_tokens=16)
    assert tally(plan, [True, None, False]) == [LoopCell("p0@t0", 1, 2)]


def test_plan_puts_the_system_message_first_when_given():
    plan = loop_plan(["a"], repeats=1, sampled_prompts=0, samples=0, temperature=0.8, seed=0, max_tokens=8, system="Be brief.")
    assert plan[0].body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"}]
