import pytest
from scipy import stats

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

TEST = {"floor": 0.002, "answer_floor": 0.1, "informative_below": 0.5, "alpha": 0.01}


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


def test_cells_where_the_reference_loops_are_left_out():
    observed = [LoopCell("p0@t0", 25, 25), LoopCell("p1@t0.8", 5, 25), LoopCell("p2@t0", 0, 25)]
    expected = {"p0@t0": LoopCell("p0@t0", 1, 1), "p1@t0.8": LoopCell("p1@t0.8", 5, 25), "p2@t0": LoopCell("p2@t0", 0, 1)}
    out = loop_test(observed, expected, **TEST)
    assert out.details["left_out"] == ["p0@t0"]
    assert out.details["sampled"]["expected"] == [5, 25]
    assert out.details["repeats"] == {"loops": 0, "n": 25, "p_value": 1.0}
    assert out.details["finding"] == "clean"


# The drill's sizes (6 T=0 repeats of 4 prompts, 10 samples of 2) against a reference's plan.
REFERENCE = {**{f"p{i}@t0": LoopCell(f"p{i}@t0", 0, 1) for i in range(4)},
             "p0@t0.8": LoopCell("p0@t0.8", 1, 10), "p1@t0.8": LoopCell("p1@t0.8", 0, 10)}  # fmt: skip


def drill_cells(t0: list[int], sampled: list[int]) -> list[LoopCell]:
    return [*(LoopCell(f"p{i}@t0", k, 6) for i, k in enumerate(t0)),
            *(LoopCell(f"p{i}@t0.8", k, 10) for i, k in enumerate(sampled))]  # fmt: skip


def test_a_prompt_whose_greedy_answer_loops_on_an_honest_engine_is_one_looping_answer():
    # The 2026-12-07 drill, seed 2: llama-cpp-python's `Llama` (text untouched) looped on every T=0
    # repeat of one prompt where the reference's greedy answer did not; counted 6 times over, the
    # test failed it at p = 5.7e-05 (7 of 44 against the reference's 1 of 44).
    out = loop_test(drill_cells([6, 0, 0, 0], [1, 0]), REFERENCE, **TEST)
    assert out.details["finding"] == "clean" and out.p_value > 0.1
    assert out.details["repeats"]["loops"] == 0 and out.details["greedy"] == {
        "loops": 1, "n": 4, "p_value": pytest.approx(1 - 0.9**4)}


def test_every_prompt_looping_at_t0_is_a_finding_and_three_of_four_is_not():
    out = loop_test(drill_cells([6, 6, 6, 6], [1, 0]), REFERENCE, **TEST)
    assert out.details["greedy"]["p_value"] == pytest.approx(1e-4)
    assert out.details["repeats"] == {"loops": 0, "n": 24, "p_value": 1.0}
    assert out.details["finding"] == "loops" and out.p_value == pytest.approx(3e-4)
    # The limit, written down: one prompt's greedy loop is an honest engine's (the drill's `Llama`),
    # so three of four is p = 0.0037 a part, 0.011 over three.
    three = loop_test(drill_cells([6, 6, 6, 0], [1, 0]), REFERENCE, **TEST)
    assert three.p_value == pytest.approx(3 * (4 * 0.1**3 * 0.9 + 0.1**4)) and three.details["finding"] == "clean"


@pytest.mark.parametrize("t0", [[4, 4, 4, 0], [5, 5, 0, 0]])
def test_repeats_that_come_and_go_count_whichever_way_the_cells_answer_goes(t0: list[int]):
    # Looping on most but not all repeats of some prompts left those cells' clean repeats out of
    # the repeats' count, and the test clean (p = 0.011 and 0.16).
    out = loop_test(drill_cells(t0, [1, 0]), REFERENCE, **TEST)
    assert out.details["repeats"]["loops"] == sum(min(k, 6 - k) for k in t0)
    assert out.details["finding"] == "loops"


def test_sampled_answers_are_held_only_to_the_reference_cells_they_match():
    # The reference lost p1's samples: p1's loops against p0's expectation were a false finding.
    reference = {k: v for k, v in REFERENCE.items() if k != "p1@t0.8"}
    reference["p0@t0.8"] = LoopCell("p0@t0.8", 0, 10)
    out = loop_test(drill_cells([0, 0, 0, 0], [0, 6]), reference, **TEST)
    assert out.details["sampled"] == {"loops": 0, "n": 10, "expected": [0, 10], "p_value": 1.0}
    assert out.details["finding"] == "clean"


def test_a_reference_that_sampled_no_loop_is_not_a_share_of_zero():
    reference = {**REFERENCE, "p0@t0.8": LoopCell("p0@t0.8", 0, 10)}
    out = loop_test(drill_cells([0, 0, 0, 0], [2, 1]), reference, **TEST)
    # Fisher: 3 of 20 against 0 of 20 (against a share of 0 or the floor: p = 9e-06)
    assert out.details["sampled"]["p_value"] == pytest.approx(1140 / 9880)
    assert out.details["finding"] == "clean"


def test_loops_that_come_and_go_between_greedy_repeats_are_a_fault():
    # 20% of answers looping, whatever the request: T=0 repeats of one request disagree.
    out = loop_test(drill_cells([1, 2, 1, 0], [2, 2]), REFERENCE, **TEST)
    assert out.details["finding"] == "loops" and out.p_value < 1e-5
    assert out.details["repeats"] == {"loops": 4, "n": 24, "p_value": pytest.approx(out.p_value / 3)}


def test_an_endpoint_whose_every_answer_loops_fails_on_its_answers():
    out = loop_test(drill_cells([6, 6, 6, 6], [10, 9]), REFERENCE, **TEST)
    assert out.details["finding"] == "loops" and out.details["sampled"]["p_value"] < 1e-6
    assert out.details["repeats"]["loops"] == 0 and out.details["greedy"]["loops"] == 4
    assert out.p_value == pytest.approx(3 * out.details["sampled"]["p_value"])


def test_without_an_expectation_answers_are_held_to_the_answer_floor():
    two_greedy = loop_test(drill_cells([6, 6, 0, 0], [0, 0]), None, **TEST)
    assert two_greedy.details["greedy"]["p_value"] == pytest.approx(1 - 0.9**4 - 4 * 0.1 * 0.9**3)
    assert two_greedy.details["finding"] == "clean"
    sampled = loop_test(drill_cells([0, 0, 0, 0], [8, 7]), None, **TEST)
    assert sampled.details["sampled"] == {
        "loops": 15, "n": 20, "expected": [0, 0], "p_value": pytest.approx(float(stats.binom.sf(14, 20, 0.1)))}
    assert sampled.details["finding"] == "loops"


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
