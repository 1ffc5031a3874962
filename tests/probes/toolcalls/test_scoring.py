"""The pure scoring: per-case outcomes, the K2VV-style figures, and the judgement."""

from __future__ import annotations

from typing import Any

import pytest
from scipy import stats

from probes.settings import ToolCallSettings
from probes.toolcalls.cases import Case, ExpectedCall
from probes.toolcalls.scoring import CaseOutcome, Figures, error_test, exact_match, figures, judge, outcome_of
from probes.toolcalls.validator import SchemaCache
from tests.probes.toolcalls.fakes import call_response, text_response
from tests.probes.toolcalls.test_validator import WEATHER

SETTINGS = ToolCallSettings()


def case(expected: tuple[ExpectedCall, ...] | None = None, *, expect_call: bool = True) -> Case:
    return Case("c1", "single", ({"role": "user", "content": "x"},), (WEATHER,), "auto", 64, expect_call, expected)


def test_exact_match_ignores_order_and_number_spelling() -> None:
    expected = (ExpectedCall("a", {"n": 100}), ExpectedCall("b", {"s": "x"}))
    assert exact_match(expected, [("b", {"s": "x"}), ("a", {"n": 100.0})])
    assert not exact_match(expected, [("a", {"n": 100})])
    assert not exact_match(expected, [("a", {"n": 100}), ("b", {"s": "y"})])


def test_outcome_of_a_response() -> None:
    schemas = SchemaCache()
    paris = (ExpectedCall("get_weather", {"city": "Paris"}),)
    good = outcome_of(case(paris), call_response([("get_weather", {"city": "Paris"})]), schemas)
    assert good.triggered and good.schema_ok and good.exact and not good.bad and good.judged
    wrong = outcome_of(case(paris), call_response([("get_weather", {"city": "Rome"})]), schemas)
    assert wrong.schema_ok and wrong.exact is False and not wrong.bad
    broken = outcome_of(case(paris), call_response([("get_weather", {"town": "Paris"})]), schemas)
    assert broken.bad and not broken.schema_ok and broken.counts == {"schema_mismatch": 1}
    text = outcome_of(case(expect_call=False), text_response("hi"), schemas)
    assert not text.triggered and not text.bad and text.exact is None
    cut = outcome_of(case(paris), spent(call_response([("get_weather", {"city": "P"})], finish="length"), 64), schemas)
    assert not cut.judged
    assert CaseOutcome.from_stored("c1", good.stored()) == CaseOutcome("c1", True, True, True, False, True, {})


def spent(response: dict[str, Any], completion_tokens: int | None) -> dict[str, Any]:
    usage = None if completion_tokens is None else {"prompt_tokens": 30, "completion_tokens": completion_tokens}
    return {**response, "usage": usage}


def test_a_length_finish_short_of_max_tokens_is_a_bad_response() -> None:
    """finish_reason "length" is the client's cut only when max_tokens were spent: an endpoint
    that labels a broken answer "length" after 20 of 64 tokens cannot hide it from the error test."""
    schemas = SchemaCache()
    broken = call_response([("get_weather", {"town": "Paris"})], finish="length")
    hidden = outcome_of(case(), spent(broken, 20), schemas)
    assert hidden.judged and hidden.bad and hidden.counts == {"finish_reason_mismatch": 1}
    assert not outcome_of(case(), spent(broken, 64), schemas).judged  # max_tokens spent: the client's cut
    assert not outcome_of(case(), spent(broken, None), schemas).judged  # no count: nothing to hold it to
    odd = {**broken, "usage": {"completion_tokens": "20"}}
    assert not outcome_of(case(), odd, schemas).judged


def _o(cid: str, triggered: bool, *, ok: bool = True, bad: bool = False, exact: bool | None = None) -> CaseOutcome:
    return CaseOutcome(cid, triggered, True, triggered and ok, bad, exact, {})


def test_figures_count_triggers_against_the_truth() -> None:
    outcomes = [
        _o("a", True, exact=True),
        _o("b", True, ok=False, bad=True, exact=False),
        _o("c", False),  # missed call
        _o("d", True),  # called where no call is right
        _o("e", False),
    ]
    fig = figures(outcomes, {"a": True, "b": True, "c": True, "d": False, "e": False})
    assert (fig.tp, fig.fp, fig.fn, fig.tn) == (2, 1, 1, 1)
    assert fig.precision == pytest.approx(2 / 3) and fig.recall == pytest.approx(2 / 3)
    assert fig.f1 == pytest.approx(2 / 3)
    assert fig.schema_accuracy == pytest.approx(2 / 3) and fig.error_rate == pytest.approx(1 / 5)
    assert fig.exact_match == pytest.approx(1 / 2)
    none = figures([_o("e", False)], {"e": False})
    assert none.f1 == 1.0 and none.schema_accuracy is None  # agreeing on "no call" is perfect


def _fig(calls: int, ok: int, bad: int, *, tp: int | None = None, fn: int = 0, det: int = 0, exact: int = 0) -> Figures:
    judged = calls + 20
    tp = calls if tp is None else tp
    return Figures(judged, judged, calls, ok, bad, tp, calls - tp, fn, 20 - fn, det, exact)


def test_error_test_is_the_binomial_tail() -> None:
    assert error_test(3, 100, 0.002) == pytest.approx(stats.binom.sf(2, 100, 0.002))
    assert error_test(0, 100, 0.002) == pytest.approx(1.0)
    assert error_test(3, 100, 0.002) < 0.01 < error_test(2, 100, 0.002)


def test_clean_run_passes_without_a_reference() -> None:
    j = judge(_fig(100, 100, 0), None, SETTINGS, 0.002)
    assert j.verdict == "pass" and not j.demote and j.reasons == ()
    assert j.details["pass_marks"]["schema_accuracy"] == SETTINGS.schema_floor


def test_bad_responses_fail_and_a_low_schema_accuracy_demotes() -> None:
    three = judge(_fig(100, 97, 3), None, SETTINGS, 0.002)
    assert three.verdict == "fail" and three.p_value is not None and three.p_value < 0.01 and not three.demote
    many = judge(_fig(100, 90, 10), None, SETTINGS, 0.002)
    assert many.verdict == "fail" and many.demote


def test_the_reference_sets_the_null_rate_and_the_pass_marks() -> None:
    ref = _fig(100, 90, 10, det=50, exact=40)  # a weak reference engine: 10% bad
    same = judge(_fig(100, 90, 10, det=50, exact=40), ref, SETTINGS, 0.002)
    assert same.verdict == "pass", same.reasons
    assert same.details["null_error_rate"] == pytest.approx(10 / 120)
    assert same.details["pass_marks"]["schema_accuracy"] == pytest.approx(0.87)
    assert "fisher_p" in same.details
    worse = judge(_fig(100, 80, 20, det=50, exact=40), ref, SETTINGS, 0.002)
    assert worse.verdict == "fail"
    assert any("schema accuracy" in r for r in worse.reasons)


def test_trigger_and_exact_match_marks_apply_with_a_reference() -> None:
    ref = _fig(100, 100, 0, det=50, exact=45)
    shy = judge(_fig(100, 100, 0, tp=70, fn=30, det=50, exact=45), ref, SETTINGS, 0.002)  # misses 30 calls
    assert shy.verdict == "fail" and any("F1" in r for r in shy.reasons)
    sloppy = judge(_fig(100, 100, 0, det=50, exact=30), ref, SETTINGS, 0.002)
    assert sloppy.verdict == "fail" and any("exact-argument" in r for r in sloppy.reasons)


def test_a_miss_of_the_references_own_marks_rests_on_the_reference() -> None:
    """Trigger F1 and exact arguments are judged against the reference's self-run, i.e. against
    another engine's tool prompting: failing only those is a reference disagreement (SUSPECT at
    most), while bad responses and the fixed floors stay on the endpoint's own grounds."""
    ref = _fig(100, 100, 0, det=50, exact=45)
    shy = judge(_fig(100, 100, 0, tp=70, fn=30, det=50, exact=30), ref, SETTINGS, 0.002)
    assert shy.verdict == "fail" and shy.grounds == "reference", shy.reasons
    # Its own-grounds error test still reaches the fleet's e-value (review finding: it was dropped).
    assert shy.details["self_p_value"] == shy.p_value == 1.0
    broken = judge(_fig(100, 97, 3, tp=70, fn=30, det=50, exact=30), ref, SETTINGS, 0.002)
    assert broken.verdict == "fail" and broken.grounds == "self", broken.reasons
    weak_ref = _fig(100, 90, 10)
    below_ref = judge(_fig(100, 80, 20), weak_ref, SETTINGS, 0.002)
    assert below_ref.verdict == "fail" and below_ref.grounds == "self"  # 20% bad: the error test rejects
    assert judge(_fig(100, 97, 3), None, SETTINGS, 0.002).grounds == "self"
    hard = judge(_fig(100, 90, 10), None, SETTINGS, 0.002)
    assert hard.demote and hard.grounds == "self"
    # Below the fixed floor is the endpoint's own ground even when the reference set a lower mark.
    below_floor = judge(_fig(100, 96, 0), _fig(100, 100, 0), SETTINGS, 0.002)
    assert below_floor.verdict == "fail" and below_floor.grounds == "self", below_floor.reasons


def test_a_fixed_floor_the_reference_itself_misses_is_no_evidence() -> None:
    """A model weak at tools misses the fixed floors on its reference engine too: an endpoint a
    little below that reference's mark is a reference disagreement (SUSPECT at most), never an
    outright demotion, and never the endpoint's own ground."""
    weak_ref = _fig(100, 80, 20)  # the reference's own schema accuracy: 80%
    near = judge(_fig(100, 76, 24), weak_ref, SETTINGS, 0.002)  # below its mark (77%), not its error rate
    assert near.verdict == "fail" and any("schema accuracy" in r for r in near.reasons), near.reasons
    assert not near.demote and near.grounds == "reference"
    assert near.details["reference_below_floor"] and near.details["schema_fisher_p"] > SETTINGS.alpha
    # Far below it, the error test is the endpoint's own ground; still no outright demotion.
    far = judge(_fig(100, 40, 60), weak_ref, SETTINGS, 0.002)
    assert far.verdict == "fail" and far.grounds == "self" and not far.demote
    # A broken reference cannot shield a far worse endpoint: its schema misses against the
    # reference's (Fisher) are the endpoint's own ground, whatever the error test says.
    broken_ref = _fig(100, 60, 10)
    worse = judge(_fig(100, 30, 10), broken_ref, SETTINGS, 0.002)
    assert worse.details["self_p_value"] > SETTINGS.alpha  # the error test alone would not see it
    assert worse.verdict == "fail" and worse.grounds == "self" and worse.details["schema_fisher_p"] < 1e-4
    # A reference that meets the floors keeps the hard rule.
    assert judge(_fig(100, 90, 10), _fig(100, 100, 0), SETTINGS, 0.002).demote
    # Too few reference calls to measure its accuracy: the fixed floors, as without a reference.
    assert judge(_fig(100, 90, 10), _fig(5, 0, 5), SETTINGS, 0.002).demote


def test_the_hard_rule_needs_a_missed_pass_mark() -> None:
    """Under the hard floor but above a reference's lower pass mark is no reason: no demotion,
    and an unrelated reference disagreement (trigger F1) does not turn it into one."""
    ref = _fig(100, 96, 4)  # pass mark 93%
    quiet = judge(_fig(100, 94, 6), ref, SETTINGS, 0.002)
    assert quiet.verdict == "pass" and not quiet.demote
    shy = judge(_fig(100, 94, 6, tp=70, fn=30), ref, SETTINGS, 0.002)
    assert shy.verdict == "fail" and not shy.demote and shy.grounds == "reference", shy.reasons


def test_a_reference_with_few_finished_answers_excuses_errors_only_as_a_disagreement() -> None:
    """SmolLM2 under llama-server finishes 12-20 of the suite's 120 cases, 5-11 of them bad (no
    call where one is forced): an honest endpoint on that engine errs as it does, so its errors
    above the baseline are no ground of its own (at the baseline alone it would demote). But a rate
    from a few answers is a thin excuse (review: 1 bad of 1 made the null 100% and a 60% leaking
    endpoint passed): the baseline still fails it, on the reference's grounds (SUSPECT at most).
    Trigger F1 and exact arguments need min_calls finished reference answers."""
    ref = Figures(120, 12, 0, 0, 5, 0, 0, 7, 5, 6, 0)
    same_engine = Figures(120, 25, 0, 0, 10, 0, 0, 15, 10, 12, 0)
    j = judge(same_engine, ref, SETTINGS, 0.002)
    assert j.details["null_error_rate"] == pytest.approx(5 / 12) and j.details["null_source"] == "reference"
    assert j.details["self_p_value"] > SETTINGS.alpha and "f1" not in j.details["pass_marks"]
    assert j.verdict == "fail" and j.grounds == "reference" and not j.demote, j.reasons
    alone = judge(same_engine, None, SETTINGS, 0.002)
    assert alone.verdict == "fail" and alone.grounds == "self"  # what the baseline alone says
    leaking = Figures(120, 100, 5, 5, 60, 5, 0, 60, 35, 30, 5)  # 60 calls leaked into content
    one = judge(leaking, Figures(120, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0), SETTINGS, 0.002)
    assert one.details["null_error_rate"] == 1.0
    assert one.verdict == "fail" and one.grounds == "reference", one.reasons
    # With min_calls finished answers, the reference's rate is the null on its own (and its
    # answers the truth: no call where it made none).
    full_ref = Figures(120, 24, 0, 0, 10, 0, 0, 0, 24, 12, 0)
    as_ref = Figures(120, 25, 0, 0, 10, 0, 0, 0, 25, 12, 0)
    assert judge(as_ref, full_ref, SETTINGS, 0.002).verdict == "pass"


def test_too_few_responses_are_inconclusive() -> None:
    fig = Figures(19, 19, 19, 0, 19, 19, 0, 0, 0, 0, 0)  # min_calls is 20
    j = judge(fig, None, SETTINGS, 0.002)
    assert j.verdict == "inconclusive" and j.p_value is None


DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON that json.loads cannot parse (RecursionError)


@pytest.mark.parametrize("tool_calls", [
    [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": DEEP}}],
    ["get_weather"], [{"function": "get_weather"}], {"get_weather": {}},
])
def test_a_hostile_call_is_a_bad_response_not_an_exception(tool_calls: Any) -> None:
    # scoring read the calls itself: a call that was not an object raised AttributeError, arguments
    # nested past the recursion limit RecursionError, out of the probe (which ended "error").
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    response = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    paris = (ExpectedCall("get_weather", {"city": "Paris"}),)
    out = outcome_of(case(paris), response, SchemaCache())
    assert out.bad and not out.schema_ok and not out.exact
