"""The audit-start template check's comparison, on its own."""

from __future__ import annotations

from dataclasses import replace

from probes.template_check import TemplateCheck, TemplateResult, compare
from tests.fakes.catalog import make_endpoint


def test_equal_counts_are_the_same_template() -> None:
    assert compare([31, 40], [31, 40]).status == "same"


def test_a_default_system_prompt_shows_as_a_difference() -> None:
    check = compare([55, 40], [31, 40])  # SmolLM2's own template adds 24 tokens without a system message
    assert check.status == "differs" and "[55, 40]" in check.reason and "[31, 40]" in check.reason


def test_off_by_one_bos_handling_differs_too() -> None:
    assert compare([32, 41], [31, 40]).status == "differs"


def test_without_a_pair_of_counts_it_is_unknown() -> None:
    assert compare([None, 40], [31, None]).status == "unknown"
    assert compare([None, 41], [31, 40]).status == "differs"


A_Q4 = make_endpoint("a/m", weights="Q4_1")
REF_Q4 = make_endpoint("ref/m", weights="Q4_1")


def _judged(endpoint: list[int | None], reference: list[int | None], unanswered: tuple[int, ...] = (),
            rerun: bool = False) -> str | None:
    check = replace(compare(endpoint, reference), endpoint_unanswered=unanswered)
    result = TemplateResult().judge(check, A_Q4, REF_Q4, rerun=rerun)
    return None if result is None else result.verdict


def test_as_a_result_against_the_same_weights() -> None:
    assert _judged([32, 41], [31, 40]) == "fail"
    assert _judged([31, 40], [31, 40]) is None  # no quality evidence
    assert _judged([31, 40], [31, 40], rerun=True) == "pass"  # a template alarm's re-run
    # Answered without the count the reference gave: unchecked rendering, whatever else was counted.
    assert _judged([None, 40], [31, 40]) == "fail"
    assert _judged([None, None], [None, 14], unanswered=(0,)) == "fail"
    # Not answered at all: availability, not quality.
    assert _judged([None, None], [31, 40], unanswered=(0, 1)) == "error"
    assert _judged([None, 40], [None, 40], unanswered=()) is None  # the reference counted nothing there


def test_other_or_unknown_weights_give_no_result() -> None:
    check = compare([55, 40], [31, 40])
    assert TemplateResult().judge(check, make_endpoint("a/m"), REF_Q4) is None
    assert TemplateResult().judge(check, make_endpoint("a/m", weights="bf16"), REF_Q4) is None


def test_a_re_check_with_no_time_left_says_so() -> None:
    # The re-run's reason was always "the reference reported no prompt_tokens", whatever the cause.
    timed_out = TemplateCheck("unknown", reason="the audit's time ran out before the check answered")
    result = TemplateResult().judge(timed_out, A_Q4, REF_Q4, rerun=True)
    assert result is not None and result.verdict == "inconclusive"
    assert (result.details or {})["reason"] == timed_out.reason
    uncounted = TemplateResult().judge(compare([None, None], [None, None]), A_Q4, REF_Q4, rerun=True)
    assert uncounted is not None and "prompt_tokens" in (uncounted.details or {})["reason"]
