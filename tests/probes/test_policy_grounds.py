"""Self-history first: a failure that rests on disagreement with the reference engine alone raises
SUSPECT, never DEMOTED; with an independent failure (fidelity, tool calls, usage, the golden
window) it demotes, and the reason names both; the way back (PROBATION -> HEALTHY) still works."""

from __future__ import annotations

import itertools
from dataclasses import replace

from kernel.health import EndpointHealth, HealthState
from probes.base import Effect, Grounds, ProbeResult, Verdict
from probes.evidence import EvidenceState
from probes.policy import decide, settles_confirmation
from probes.settings import HealthSettings

S = HealthSettings(demoted_min_seconds=3600, probation_seconds=7200, clean_windows=2, suspect_e=20, demote_e=720)
NOW = 100_000.0


def r(
    probe: str,
    verdict: Verdict,
    effect: Effect = "evidence",
    *,
    grounds: Grounds = "self",
    p: float | None = None,
    e: float | None = None,
) -> ProbeResult:
    return ProbeResult(probe=probe, verdict=verdict, samples=10, p_value=p, e_value=e, effect=effect, grounds=grounds)


def at(state: HealthState, *, ago: float = 0.0) -> EndpointHealth:
    return EndpointHealth(state, since=NOW - ago)


DRIFT_REF = r("logprob_drift", "fail", grounds="reference", p=5e-05, e=10.5)
DIST_REF = r("distribution", "fail", "confirm", grounds="reference", p=0.0009)
FIDELITY_PASS = r("fidelity", "pass", p=0.4, e=0.5)
FIDELITY_FAIL = r("fidelity", "fail", p=4e-18, e=10.5)


def test_a_reference_only_failure_raises_suspect() -> None:
    d = decide(at("healthy"), EvidenceState(), [DRIFT_REF], confirm=False, now=NOW, settings=S, trigger="manual")
    assert d.to_state == "suspect" and d.confirm_for == ("logprob_drift",)
    assert "against the reference" in d.reason
    assert not d.evidence.grounded("logprob_drift")  # its run holds no failure on the endpoint's own grounds
    assert d.evidence.own == {"logprob_drift": 0.5}  # stepped as a passing window


def test_a_reference_only_failure_of_the_confirmatory_re_run_keeps_it_suspect_not_demoted() -> None:
    """The issue's honest endpoints: drift and distribution fail against the reference, fidelity passes."""
    suspect = EvidenceState({"logprob_drift": 10.5}, suspects=("logprob_drift",))
    d = decide(
        at("suspect"),
        suspect,
        [DRIFT_REF, DIST_REF, FIDELITY_PASS],
        confirm=True,
        now=NOW,
        settings=S,
        trigger="manual",
    )
    assert d.to_state is None, d.reason  # stays SUSPECT
    assert "reference disagreement alone" in d.reason and "not demoted" in d.reason
    assert "logprob_drift fail (p=5e-05, against the reference)" in d.reason
    assert "distribution fail (p=0.0009, against the reference)" in d.reason
    assert "logprob_drift" in d.confirm_for  # the next confirmatory round asks again
    assert "logprob_drift" not in d.evidence.cusum  # its reference-only e-CUSUM restarts


def test_reference_and_an_independent_confirmation_demote_and_the_reason_names_both() -> None:
    suspect = EvidenceState({"logprob_drift": 10.5}, suspects=("logprob_drift",))
    d = decide(
        at("suspect"),
        suspect,
        [DRIFT_REF, DIST_REF, FIDELITY_FAIL],
        confirm=True,
        now=NOW,
        settings=S,
        trigger="manual",
    )
    assert d.to_state == "demoted", d.reason
    assert "logprob_drift fail (p=5e-05, against the reference)" in d.reason
    assert "confirmed independently by fidelity fail (p=4e-18)" in d.reason


def test_the_golden_window_is_an_independent_confirmation() -> None:
    """A drift re-run that fails against the endpoint's own golden window is on its own grounds."""
    suspect = EvidenceState({"logprob_drift": 10.5}, suspects=("logprob_drift",))
    golden = r("logprob_drift", "fail", grounds="self", p=1e-05)
    d = decide(at("suspect"), suspect, [golden, DIST_REF, FIDELITY_PASS], confirm=True, now=NOW, settings=S)
    assert d.to_state == "demoted", d.reason
    assert "confirmed independently by logprob_drift fail (p=1e-05)" in d.reason


def test_reference_only_e_cusum_past_demote_e_stays_suspect() -> None:
    """Hourly reference-only failures pile the e-CUSUM past demote_e: still SUSPECT (and the
    reference-only run restarts); when its own-grounds part is at the alarm level too, it demotes."""
    ev = EvidenceState({"logprob_drift": 700.0})
    d = decide(at("suspect"), ev, [DRIFT_REF], confirm=False, now=NOW, settings=S)
    assert d.to_state is None and "reference disagreement alone" in d.reason, d.reason
    assert "logprob_drift e-CUSUM 7.35e+03" in d.reason and d.evidence.cusum == {}
    grounded = decide(
        at("suspect"),
        EvidenceState({"logprob_drift": 700.0}, own={"logprob_drift": 2 * S.demote_e}),
        [DRIFT_REF],
        confirm=False,
        now=NOW,
        settings=S,
    )
    assert grounded.to_state == "demoted", grounded.reason
    assert "confirmed independently by logprob_drift own-grounds e-CUSUM 720" in grounded.reason
    # In a scheduled round own-grounds evidence alone counts at demote_e (a confirmatory round: suspect_e).
    weak = decide(at("suspect"), EvidenceState({"logprob_drift": 700.0}, own={"logprob_drift": 2 * S.demote_e - 1}),
                  [DRIFT_REF], confirm=False, now=NOW, settings=S)
    assert weak.to_state is None and "reference disagreement alone" in weak.reason, weak.reason


def test_a_self_failure_marks_the_e_cusum_run_until_it_restarts() -> None:
    d = decide(at("healthy"), EvidenceState(), [r("logprob_drift", "fail", p=0.01)], confirm=False, now=NOW, settings=S)
    assert d.evidence.grounded("logprob_drift")
    # Passing windows halve it; at 1 or below the run restarts and forgets the failure.
    ev = d.evidence
    for _ in range(4):
        ev = decide(at("healthy"), ev, [r("logprob_drift", "pass", p=0.5)], confirm=False, now=NOW, settings=S).evidence
    assert ev.cusum["logprob_drift"] <= 1.0 and not ev.grounded("logprob_drift")


def test_a_reference_only_usage_mismatch_is_not_a_confirmation_of_itself() -> None:
    """The sentinel's counts unequal to the reference's (another template) twice: SUSPECT, not DEMOTED."""
    usage = r("sentinels", "fail", "suspect", grounds="reference")
    d = decide(at("healthy"), EvidenceState(), [usage], confirm=False, now=NOW, settings=S)
    assert d.to_state == "suspect"
    again = decide(at("suspect"), d.evidence, [usage], confirm=True, now=NOW, settings=S)
    assert again.to_state is None and "reference disagreement alone" in again.reason
    hard = decide(
        at("suspect"), d.evidence, [usage, r("toolcalls", "fail", "demote")], confirm=True, now=NOW, settings=S
    )
    assert hard.to_state == "demoted" and "confirmed independently by toolcalls fail" in hard.reason


def test_on_probation_a_reference_only_alarm_keeps_it_on_probation() -> None:
    d = decide(at("probation", ago=10), EvidenceState(), [DIST_REF], confirm=False, now=NOW, settings=S)
    assert d.to_state is None and "not demoted on distribution fail" in d.reason, d.reason
    worse = decide(
        at("probation", ago=10),
        EvidenceState(),
        [DIST_REF, FIDELITY_FAIL],
        confirm=False,
        now=NOW,
        settings=S,
        trigger="manual",
    )
    assert worse.to_state == "demoted"


def test_the_way_back_still_works_while_the_reference_disagrees() -> None:
    """Demoted for a fidelity fault that is then fixed, on an engine that never matches the reference:
    reference-only failures count as clean rounds, so it goes DEMOTED -> PROBATION -> HEALTHY."""
    ev = EvidenceState()
    first = decide(at("demoted", ago=7200), ev, [DRIFT_REF, FIDELITY_PASS], confirm=False, now=NOW, settings=S)
    assert first.to_state is None and "clean round 1/2" in first.reason and "reference disagreement" in first.reason
    second = decide(
        at("demoted", ago=7200), first.evidence, [DRIFT_REF, FIDELITY_PASS], confirm=False, now=NOW, settings=S
    )
    assert second.to_state == "probation", second.reason
    stays = decide(
        at("probation", ago=10), second.evidence, [DRIFT_REF, FIDELITY_PASS], confirm=False, now=NOW, settings=S
    )
    assert stays.to_state is None
    back = decide(
        at("probation", ago=7200), stays.evidence, [DRIFT_REF, FIDELITY_PASS], confirm=False, now=NOW, settings=S
    )
    assert back.to_state == "healthy", back.reason
    # A failure on its own grounds still holds it demoted.
    held = decide(
        at("demoted", ago=7200),
        EvidenceState(clean_rounds=1),
        [DRIFT_REF, FIDELITY_FAIL],
        confirm=False,
        now=NOW,
        settings=S,
    )
    assert held.to_state is None and "still failing" in held.reason and held.evidence.clean_rounds == 0


def test_the_grounds_survive_the_store() -> None:
    ev = EvidenceState({"logprob_drift": 12.0}, own={"logprob_drift": 6.0})
    assert EvidenceState.from_json(ev.to_json()) == ev
    assert ev.reset().own == {}
    # A state stored before the own-grounds runs existed loads with none (nothing grounded).
    assert EvidenceState.from_json('{"cusum": {"logprob_drift": 12.0}, "grounded": ["logprob_drift"]}').own == {}


def test_one_chance_golden_failure_does_not_ground_a_run_of_reference_only_failures() -> None:
    """An honest endpoint on another engine, judged by the equality test, fails against the reference
    every window; its golden window fails once by chance. The e-CUSUM run that chance failure started
    is then carried by reference failures alone: it must not count as independent evidence
    (bench/health_sim.py: 4.4% of such endpoint-months ended DEMOTED)."""
    health, ev = at("healthy"), EvidenceState()
    chance = r("logprob_drift", "fail", p=0.01, e=10.5)  # the golden window, at its alpha
    for i in range(60):
        d = decide(health, ev, [chance if i == 0 else DRIFT_REF], confirm=False, now=NOW + i, settings=S)
        assert d.to_state != "demoted", (i, d.reason)
        ev = d.evidence
        if d.to_state is not None:
            health = EndpointHealth(d.to_state, since=NOW + i)
    assert health.state == "suspect"


def test_own_grounds_failures_that_reach_the_alarm_level_demote_through_the_confirmatory_round() -> None:
    """A fault the golden window sees, window after window, then windows that fail against the
    reference only: the own-grounds e-CUSUM is at the alarm level, so the confirmatory round the
    alarm asks for (the runner's, simulated here) demotes on it."""
    health, ev = at("healthy"), EvidenceState()
    own_fail = r("logprob_drift", "fail", p=0.001, e=10.5)
    demoted_at = None
    for i in range(10):
        d = decide(health, ev, [own_fail if i < 2 else DRIFT_REF], confirm=False, now=NOW + i, settings=S)
        if d.confirm and d.to_state != "demoted":
            health = EndpointHealth(d.to_state or health.state, since=NOW + i)
            d = decide(health, d.evidence, [DRIFT_REF], confirm=True, now=NOW + i, settings=S)
        ev = d.evidence
        if d.to_state is not None:
            health = EndpointHealth(d.to_state, since=NOW + i)
        if health.state == "demoted":
            demoted_at = i
            break
    assert demoted_at is not None and "own-grounds e-CUSUM" in d.reason, d.reason


HOLD = HealthSettings(suspect_e=20, demote_e=720, reference_hold_seconds=3600)


def test_a_reference_only_hold_stops_asking_for_confirmatory_rounds_until_it_ends() -> None:
    """Held back on reference disagreement alone: scheduled alarms of the same kind ask for no new
    confirmatory round during the hold (each one is a chance for an own test to fail by luck); a
    failure on the endpoint's own grounds, an audit, or the end of the hold asks again."""
    d = decide(at("suspect"), EvidenceState({"logprob_drift": 700.0}), [DRIFT_REF], confirm=False, now=NOW,
               settings=HOLD)
    assert d.to_state is None and d.evidence.held_until == NOW + 3600 and d.confirm_for, d.reason
    ev = d.evidence
    for t in (60.0, 1800.0):  # within the hold: the alarm stands, nothing is re-confirmed
        later = decide(at("suspect"), replace(ev, cusum={"logprob_drift": 700.0}), [DRIFT_REF], confirm=False,
                       now=NOW + t, settings=HOLD)
        assert later.confirm_for == () and "reference-only hold" in later.reason, later.reason
        assert later.evidence.held_until == NOW + 3600  # not extended
    chance = r("fidelity", "fail", p=0.01, e=10.5)
    window = decide(at("suspect"), ev, [DRIFT_REF, chance], confirm=False, now=NOW + 60, settings=HOLD)
    assert window.confirm_for == (), window.reason  # one own window failing by chance: still held
    strong = decide(at("suspect"), ev, [DRIFT_REF, FIDELITY_FAIL], confirm=False, now=NOW + 60, settings=HOLD)
    assert strong.confirm_for, strong.reason  # p = 4e-18, past confirm_alpha: a confirmatory round now
    tools = decide(at("suspect"), ev, [DRIFT_REF, r("toolcalls", "fail", "suspect", p=0.01)], confirm=False,
                   now=NOW + 60, settings=HOLD)
    assert "toolcalls" in tools.confirm_for, tools.reason  # an alarm probe's own alarm gets its re-run
    # Own-grounds evidence accumulated to the alarm level (the e-CUSUM is never below its own part).
    built = {"fidelity": 2 * HOLD.suspect_e}
    accumulated = decide(at("suspect"), replace(ev, cusum=built, own=built), [DRIFT_REF, chance],
                         confirm=False, now=NOW + 60, settings=HOLD)
    assert "fidelity" in accumulated.confirm_for, accumulated.reason  # the hold gives way
    audit = decide(at("suspect"), ev, [DRIFT_REF], confirm=False, now=NOW + 60, settings=HOLD, trigger="manual")
    assert audit.confirm_for, audit.reason
    after = decide(at("suspect"), ev, [DRIFT_REF], confirm=False, now=NOW + 3601, settings=HOLD)
    assert after.confirm_for, after.reason
    assert EvidenceState.from_json(ev.to_json()) == ev and ev.reset().held_until == 0.0


def test_one_scheduled_own_window_does_not_demote_but_a_confirmatory_failure_does() -> None:
    """A scheduled monitoring window is one of many looks: alone it does not confirm an alarm built
    on the reference; the same failure in a confirmatory round does."""
    ev = EvidenceState({"logprob_drift": 700.0}, suspects=("logprob_drift",))
    window = decide(at("suspect"), ev, [DRIFT_REF, FIDELITY_FAIL], confirm=False, now=NOW, settings=S)
    assert window.to_state is None, window.reason
    confirmed = decide(at("suspect"), ev, [DRIFT_REF, FIDELITY_FAIL], confirm=True, now=NOW, settings=S)
    assert confirmed.to_state == "demoted" and "confirmed independently by fidelity fail" in confirmed.reason


def test_a_chance_alarm_probe_failure_does_not_confirm_a_reference_alarm_until_it_repeats() -> None:
    """SUSPECT on the reference; a scheduled tool-call run fails once (at its alpha, by chance): that
    is a new alarm to re-run, not a confirmation. The same probe failing again does confirm."""
    tools_fail = r("toolcalls", "fail", "suspect", p=0.01)
    ev = EvidenceState({"logprob_drift": 700.0}, suspects=("logprob_drift",))
    once = decide(at("suspect"), ev, [DRIFT_REF, tools_fail], confirm=False, now=NOW, settings=S)
    assert once.to_state is None and "toolcalls" in once.confirm_for, once.reason
    again = decide(at("suspect"), replace(once.evidence, cusum={"logprob_drift": 700.0}), [DRIFT_REF, tools_fail],
                   confirm=False, now=NOW + 60, settings=S)
    assert again.to_state == "demoted" and "confirmed independently by toolcalls fail" in again.reason, again.reason


def test_an_alarm_probe_that_passes_its_re_run_is_no_longer_a_suspect() -> None:
    """Review finding: the suspects only grew, so a tool-call failure months after one that passed
    its re-run counted as 'failed again' and demoted an endpoint the reference kept SUSPECT."""
    tools_fail, tools_pass = r("toolcalls", "fail", "suspect", p=0.008), r("toolcalls", "pass", "suspect", p=0.6)
    d = decide(at("suspect"), EvidenceState({"logprob_drift": 700.0}, suspects=("logprob_drift",)),
               [DRIFT_REF, tools_fail], confirm=False, now=NOW, settings=S)
    assert "toolcalls" in d.evidence.suspects
    confirmed = decide(at("suspect"), d.evidence, [DRIFT_REF, tools_pass], confirm=True, now=NOW, settings=S)
    assert confirmed.to_state is None and "toolcalls" not in confirmed.evidence.suspects, confirmed.evidence
    later = decide(at("suspect"), replace(confirmed.evidence, cusum={"logprob_drift": 700.0}), [DRIFT_REF, tools_fail],
                   confirm=False, now=NOW + 200 * 86_400, settings=S)
    assert later.to_state != "demoted" and "toolcalls" in later.confirm_for, later.reason


def test_an_audits_first_round_confirms_only_with_a_failure_at_the_confirmatory_level() -> None:
    """Review finding F5: an on-demand audit's first round counted an own-grounds failure at the
    probe's own alpha (fidelity, 0.01) as the independent confirmation of a reference e-CUSUM past
    demote_e, so one chance failure demoted with no confirmatory round. Now that failure is an
    alarm the confirmatory round re-runs; one at confirm_alpha still counts at once."""
    ev = EvidenceState({"logprob_drift": 700.0}, suspects=("logprob_drift",))
    chance = r("fidelity", "fail", p=0.005, e=10.5)
    d = decide(at("suspect"), ev, [DRIFT_REF, chance], confirm=False, now=NOW, settings=S, trigger="manual")
    assert d.to_state is None and "reference disagreement alone" in d.reason, d.reason
    assert "fidelity" in d.confirm_for
    again = decide(at("suspect"), d.evidence, [DRIFT_REF, chance], confirm=True, now=NOW, settings=S, trigger="manual")
    assert again.to_state == "demoted" and "confirmed independently by fidelity fail" in again.reason, again.reason
    strong = r("fidelity", "fail", p=S.confirm_alpha / 2, e=10.5)
    at_once = decide(at("suspect"), ev, [DRIFT_REF, strong], confirm=False, now=NOW, settings=S, trigger="manual")
    assert at_once.to_state == "demoted" and "confirmed independently by fidelity fail" in at_once.reason


def test_a_distribution_failure_against_a_reference_of_the_same_weights_confirms_a_drift_alarm() -> None:
    """The one-tensor re-quantization of the blind drill: drift fails against the reference, then the
    distribution test against a reference that serves the weights the endpoint claims fails on the
    endpoint's own grounds (probes.distribution): independent confirmation, so it demotes."""
    suspect = EvidenceState({"logprob_drift": 10.5}, suspects=("logprob_drift",))
    dist_same_weights = r("distribution", "fail", "confirm", grounds="self", p=5e-06)
    d = decide(at("suspect"), suspect, [DRIFT_REF, dist_same_weights, FIDELITY_PASS], confirm=True, now=NOW,
               settings=S, trigger="manual")
    assert d.to_state == "demoted", d.reason
    assert "confirmed independently by distribution fail (p=5e-06)" in d.reason


def test_a_confirmatory_round_whose_own_tests_ran_out_of_time_says_so() -> None:
    """The drift alarm's re-run fails against the reference, and fidelity, the test that could have
    confirmed it on the endpoint's own grounds, was stopped at the end of its time: the reason says
    so. The reference-only hold starts all the same: without it, a test that never fits its time
    would ask for a confirmatory round at every scheduled run of a suspect endpoint."""
    cut = ProbeResult("fidelity", "inconclusive", 0, details={"out_of_time": True, "reason": "the audit's time ran out"})
    suspect = EvidenceState({"logprob_drift": 10.5}, suspects=("logprob_drift",))
    d = decide(at("suspect"), suspect, [DRIFT_REF, cut], confirm=True, now=NOW, settings=HOLD, trigger="manual")
    assert d.to_state is None and d.evidence.held_until == NOW + 3600, d.reason
    assert "fidelity ran out of time before answering" in d.reason
    answered = decide(at("suspect"), suspect, [DRIFT_REF, FIDELITY_PASS], confirm=True, now=NOW, settings=HOLD,
                      trigger="manual")
    assert "ran out of time" not in answered.reason and answered.evidence.held_until == NOW + 3600


def test_a_settling_result_demotes_whatever_the_rest_of_the_round_says() -> None:
    """The runner stops a confirmatory round at a result that settles it: sound only if no other
    result of the round could keep a healthy or suspect endpoint from DEMOTED."""
    others = [FIDELITY_PASS, FIDELITY_FAIL, DRIFT_REF, DIST_REF, r("distribution", "pass", "confirm", p=0.5),
              ProbeResult("toolcalls", "error", 0, errors=3, details={"error": "down"}),
              ProbeResult("fidelity", "inconclusive", 0, details={"out_of_time": True})]
    settling = [r("sentinels", "fail", "suspect", p=1e-30), r("toolcalls", "fail", "demote", p=0.5)]
    alarming = ("sentinels", "logprob_drift")
    for first in (DRIFT_REF, r("fidelity", "fail", p=0.01, grounds="reference"), FIDELITY_PASS):
        assert not settles_confirmation(first, alarming)
    for first, state in itertools.product(settling, ("healthy", "suspect")):
        assert settles_confirmation(first, alarming)
        for n in range(3):
            for rest in itertools.combinations(others, n):
                ev = EvidenceState({"sentinels": 10.5}, suspects=alarming)
                for trigger in ("manual", "schedule"):
                    d = decide(at(state), ev, [first, *rest], confirm=True, now=NOW, settings=S, trigger=trigger)
                    assert d.to_state == "demoted", (first.probe, [x.probe for x in rest], d.reason)


def test_an_alarm_whose_re_run_a_settled_round_left_unrun_stays_open() -> None:
    """The runner's unrun probes are no verdict, not "not applicable": if the round's decision does
    not demote after all (its stored alarm was another probe), that alarm is awaited, not cleared."""
    unrun = ProbeResult("distribution", "inconclusive", 0, details={"settled_by": "logprob_drift", "reason": "not run"})
    ev = EvidenceState({"distribution": 10.5}, suspects=("distribution",))
    d = decide(at("suspect"), ev, [r("logprob_drift", "pass", p=0.5), unrun], confirm=True, now=NOW, settings=S,
               trigger="manual")
    assert d.to_state is None and "awaiting a confirmatory verdict from distribution" in d.reason, d.reason
