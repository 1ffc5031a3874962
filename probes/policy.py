"""The health policy: probe results in, the endpoint's next health state out. Pure (time is passed
in), so every transition is tested from a table.

    HEALTHY --alarm--> SUSPECT --alarming probe fails its re-run / e-CUSUM >= demote_e--> DEMOTED
    SUSPECT --confirmatory pass--> HEALTHY (e-CUSUMs reset; every alarming probe's re-run passed)
    SUSPECT --an alarming probe's re-run gave no verdict--> SUSPECT (that probe is re-run next)
    SUSPECT --re-run passes, another confirmatory probe fails--> SUSPECT (that probe is re-run next)
    DEMOTED --min time, clean rounds--> PROBATION (e-CUSUMs reset) --probation time, clean--> HEALTHY
    PROBATION --alarm or a failing non-evidence probe--> DEMOTED

Self-history first: a failure that rests on disagreement with the reference engine alone
(`ProbeResult.grounds == "reference"`: another correct engine fails it too) may raise SUSPECT but
never demotes. Every move to DEMOTED needs independent evidence: a failure on the endpoint's own
grounds this round (its golden window, fidelity, tool-call accuracy, usage and its consistency, the
distribution test against a reference that serves the weights the endpoint claims, a hard rule) or an
e-CUSUM on its own grounds alone at the alarm level (`EvidenceState.own`: a reference-only failure
steps it as a pass, so one chance failure in a run of them fades). Without it the endpoint stays SUSPECT (on
probation: stays there), the reference-only e-CUSUMs restart, and the reason says so; a demoted
endpoint whose only failures are reference-only counts the round as clean.

An alarm is: an e-CUSUM at or above `suspect_e`, a failing "suspect" or "confirm" probe, or a
failing "evidence" probe in an on-demand audit. One noisy monitoring window never demotes: its
e-value alone stays below `suspect_e`, and a suspect endpoint is demoted only when the probe that
raised the alarm fails its own fresh re-run, by a hard rule, or by accumulated evidence. "error" and "inconclusive" results never move the state; errors
are counted as availability evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from kernel.health import EndpointHealth, HealthState
from probes.base import ProbeResult
from probes.evidence import EvidenceState
from probes.settings import HealthSettings
from probes.stats.evalues import ecusum_update

QUALITY_VERDICTS = ("pass", "fail")


@dataclass(frozen=True, slots=True)
class Decision:
    to_state: HealthState | None  # None: stay
    evidence: EvidenceState
    reason: str
    score: float | None  # the routing weight that goes with `to_state`
    # Probes whose alarms call for a confirmatory round now (empty: none).
    confirm_for: tuple[str, ...] = ()

    @property
    def confirm(self) -> bool:
        return bool(self.confirm_for)


def score_for(state: HealthState, settings: HealthSettings) -> float:
    return {
        "healthy": 1.0,
        "suspect": settings.suspect_weight,
        "probation": settings.probation_weight,
        "demoted": 0.0,
    }[state]


def cusum_step(m: float, e: float) -> float:
    """One e-CUSUM step (Shin, Ramdas, Rinaldo): M_t = e_t * max(1, M_{t-1})."""
    return ecusum_update(m, e)


def window_e(result: ProbeResult, settings: HealthSettings) -> float | None:
    """The result's e-value; a monitoring window that reports only a verdict gets the configured
    one, low + high * 1{fail} (mean 1 under the null when low + high * alpha = 1)."""
    if result.e_value is not None:
        return float(result.e_value)
    if result.effect == "evidence" and result.p_value is not None:
        return settings.window_e_low + settings.window_e_high * (result.verdict == "fail")
    return None


@dataclass(frozen=True, slots=True)
class _Round:
    evidence: EvidenceState
    quality: tuple[ProbeResult, ...]
    failed: tuple[ProbeResult, ...]
    alarms: tuple[str, ...]  # probes that raise an alarm (e-CUSUM or a failing alarm probe)
    demote: tuple[str, ...]  # probes whose evidence or hard rule demotes outright
    # Evidence on the endpoint's own grounds (described): what a demotion needs.
    independent: tuple[str, ...]
    # Probes that ran and gave no verdict: an error, or inconclusive other than "not applicable".
    no_verdict: frozenset[str] = frozenset()
    # Probes stopped at the end of their time (probes.deadline): no answer either way.
    out_of_time: frozenset[str] = frozenset()


def _tally(
    evidence: EvidenceState, results: Sequence[ProbeResult], *, confirm: bool, trigger: str, now: float,
    settings: HealthSettings, state: HealthState,
) -> _Round:
    cusum = dict(evidence.cusum)
    errors, last_error = evidence.errors, evidence.last_error
    quality = tuple(r for r in results if r.verdict in QUALITY_VERDICTS)
    for r in results:
        if r.verdict == "error" or r.errors:
            errors += max(1, r.errors)
            last_error = str((r.details or {}).get("error", "")) or f"{r.probe}: {r.errors} upstream errors"
    own = dict(evidence.own)
    if not confirm:  # a confirmatory round decides on its own; it does not feed the e-processes
        for r in quality:
            e = window_e(r, settings)
            if e is not None:
                cusum[r.probe] = cusum_step(cusum.get(r.probe, 0.0), e)
                on_own_grounds = r.verdict == "pass" or r.grounds == "self"
                own[r.probe] = cusum_step(own.get(r.probe, 0.0), e if on_own_grounds else settings.window_e_low)
    failed = tuple(r for r in quality if r.verdict == "fail")
    alarms = [p for p, m in cusum.items() if m >= settings.suspect_e]
    demote = [p for p, m in cusum.items() if m >= settings.demote_e]
    for r in failed:
        if r.effect == "demote":
            demote.append(r.probe)
        elif r.effect in ("suspect", "confirm") or (r.effect == "evidence" and trigger == "manual"):
            alarms.append(r.probe)
    alarms, demote = list(dict.fromkeys(alarms)), list(dict.fromkeys(demote))
    # What a demotion needs. A confirmatory round is the fresh test an alarm calls for: a failure on
    # the endpoint's own grounds in it counts, as does a hard rule. An audit's first round counts one
    # at confirm_alpha (at the probe's own alpha it is an alarm the confirmatory round re-runs; on
    # probation, which any alarm ends, it counts). A
    # scheduled run is one of many looks: an alarm probe's failure counts when it repeats that
    # probe's own alarm (or on probation, which any alarm ends), a monitoring window ("evidence")
    # only through the own-grounds e-CUSUM at the alarm level. Otherwise one chance failure among the
    # many rounds an endpoint the reference always fails spends SUSPECT would demote it.
    fresh = confirm or trigger != "schedule"

    def counts(r: ProbeResult) -> bool:
        repeat = r.effect != "evidence" and (r.probe in evidence.suspects or state == "probation")
        strong = confirm or (fresh and (_strong(r, settings) or state == "probation"))
        return r.grounds == "self" and (strong or r.effect == "demote" or repeat)

    independent = [_describe(r) for r in failed if counts(r)]
    # Own-grounds evidence alone: at the alarm level for a fresh test (and on probation, which any
    # alarm ends), at the demotion level in a scheduled round (where it demotes with no reference).
    level = settings.suspect_e if fresh or state == "probation" else settings.demote_e
    independent += [f"{p} own-grounds e-CUSUM {own[p]:.3g}" for p in dict.fromkeys((*demote, *alarms))
                    if own.get(p, 0.0) >= level and not any(r.probe == p and counts(r) for r in failed)]
    new = replace(evidence, cusum=cusum, errors=errors, last_error=last_error, updated=now,
                  own={p: m for p, m in own.items() if p in cusum})
    no_verdict = frozenset(r.probe for r in results if r.verdict == "error"
                           or (r.verdict == "inconclusive" and "skipped" not in (r.details or {})))
    out_of_time = frozenset(r.probe for r in results if (r.details or {}).get("out_of_time"))
    return _Round(new, quality, failed, tuple(alarms), tuple(demote), tuple(independent), no_verdict, out_of_time)


def _still_suspect(probes: Sequence[str], rnd: _Round) -> tuple[str, ...]:
    """The suspects after this round: a probe that passed its run in it (and raises no alarm) is no
    longer one, so a later chance failure of it is a new alarm, not a repeat that demotes."""
    cleared = {r.probe for r in rnd.quality if r.verdict == "pass"} - {r.probe for r in rnd.failed} - set(rnd.alarms)
    return tuple(p for p in dict.fromkeys(probes) if p not in cleared)


def _strong(r: ProbeResult, settings: HealthSettings) -> bool:
    """A failure at the confirmatory level: enough to ask for a confirmatory round during a hold."""
    return r.p_value is not None and r.p_value <= settings.confirm_alpha


def _describe(r: ProbeResult) -> str:
    stat = f"p={r.p_value:.3g}" if r.p_value is not None else f"e={r.e_value:.3g}" if r.e_value is not None else ""
    against = "against the reference" if r.grounds == "reference" and r.verdict == "fail" else ""
    notes = ", ".join(n for n in (stat, against) if n)
    return f"{r.probe} {r.verdict}" + (f" ({notes})" if notes else "")


# Said when a demotion is held back: which tests could confirm a reference disagreement.
INDEPENDENT_TESTS = ("fidelity, tool-call accuracy, usage and its consistency, the golden window, "
                     "the distribution test against a reference of the same weights")


def decide(
    health: EndpointHealth,
    evidence: EvidenceState,
    results: Sequence[ProbeResult],
    *,
    confirm: bool,
    now: float,
    settings: HealthSettings,
    trigger: str = "schedule",
) -> Decision:
    """The next state of one endpoint after a round of probe results (see the module docstring)."""
    rnd = _tally(evidence, results, confirm=confirm, trigger=trigger, now=now, settings=settings, state=health.state)
    ev = rnd.evidence
    if health.manual:
        return Decision(None, ev, "pinned by an operator", None)
    if not rnd.quality:
        return Decision(None, ev, "no quality evidence this round (errors or inconclusive only)", None)

    # A reference-only hold: until it ends, scheduled rounds ask for no new confirmatory round
    # unless own-grounds evidence counts (rnd.independent) or an alarm probe fails on its own grounds
    # (its alarm gets its re-run); one monitoring window failing by chance is not enough.
    holding = (not confirm and trigger == "schedule" and now < ev.held_until and not rnd.independent
               and not any(r.grounds == "self" and (r.effect != "evidence" or _strong(r, settings)) for r in rnd.failed)
               and not any(ev.own.get(p, 0.0) >= settings.suspect_e for p in rnd.alarms))

    def move(state: HealthState, reason: str, evidence: EvidenceState, confirm_for: tuple[str, ...] = ()) -> Decision:
        if holding and confirm_for:
            confirm_for = ()
            reason += f" (reference-only hold: next confirmatory round after {ev.held_until - now:.0f} s)"
        if state == health.state:
            return Decision(None, evidence, reason, None, confirm_for)
        return Decision(state, evidence, reason, score_for(state, settings), confirm_for)

    failures = ", ".join(_describe(r) for r in rnd.failed)
    peak = f"e-CUSUM {ev.peak:.3g}"
    state = health.state
    reference = [_describe(r) for r in rnd.failed if r.grounds == "reference"]

    def demote(why: str, evidence: EvidenceState, hold: HealthState = "suspect") -> Decision:
        """To DEMOTED with independent evidence (named in the reason when a reference disagreement
        is part of it); without, the endpoint holds at `hold` and its reference-only e-CUSUMs restart."""
        if rnd.independent:
            by_cusum = any("own-grounds e-CUSUM" in i for i in rnd.independent)
            also = f"; confirmed independently by {', '.join(rnd.independent)}" if reference or by_cusum else ""
            return move("demoted", why + also, evidence)
        kept = replace(evidence, cusum={p: m for p, m in evidence.cusum.items() if evidence.grounded(p)},
                       clean_rounds=0)
        ungrounded = [f"{p} e-CUSUM {m:.3g}" for p, m in evidence.cusum.items() if not evidence.grounded(p)
                      and (p in rnd.alarms or p in rnd.demote)]
        what = ", ".join(dict.fromkeys([*reference, *ungrounded])) or failures or peak
        if reference or ungrounded:
            why = (f"{why}; reference disagreement alone ({what}): {hold}, not demoted, until an independent test "
                   f"confirms it ({INDEPENDENT_TESTS})")
        else:
            why = (f"{why}; one scheduled window on the endpoint's own grounds ({what}): {hold}, not demoted, until "
                   f"its own-grounds e-CUSUM reaches {settings.suspect_e:g} or a confirmatory round fails")
        if hold != "suspect":
            return move(hold, why, kept)
        if rnd.out_of_time:  # said, so that an operator can re-run it with more time (the hold starts anyway)
            why += f"; {', '.join(sorted(rnd.out_of_time))} ran out of time before answering"
        if not holding:
            kept = replace(kept, held_until=now + settings.reference_hold_seconds)
        suspects = _still_suspect((*evidence.suspects, *(r.probe for r in rnd.failed), *rnd.alarms), rnd)
        return move("suspect", why, replace(kept, suspects=suspects), suspects)

    if state == "demoted":  # any failure on its own grounds keeps it there (the way back is cautious)
        if rnd.independent or any(r.grounds == "self" for r in rnd.failed):
            return move("demoted", f"still failing: {failures or peak}", replace(ev, clean_rounds=0))
        clean = replace(ev, clean_rounds=ev.clean_rounds + 1,
                        cusum={p: m for p, m in ev.cusum.items() if ev.grounded(p)})
        waited = now - health.since
        if waited >= settings.demoted_min_seconds and clean.clean_rounds >= settings.clean_windows:
            return move("probation", f"{clean.clean_rounds} clean rounds after {waited:.0f} s demoted", clean.reset())
        note = f" (reference disagreement alone: {', '.join(reference)})" if reference else ""
        return move("demoted", f"clean round {clean.clean_rounds}/{settings.clean_windows}{note}", clean)

    if state == "probation":  # a SUSPECT trigger sends it back; a single noisy window does not
        if rnd.alarms or rnd.demote or any(r.effect != "evidence" for r in rnd.failed):
            held = demote(f"failed on probation: {failures or peak}", replace(ev, clean_rounds=0), "probation")
            if held.to_state is not None:
                return held
            ev = held.evidence  # reference disagreement alone: probation runs on, its clock with it
        waited = now - health.since
        note = f" (reference disagreement alone: {', '.join(reference)})" if reference else ""
        if waited >= settings.probation_seconds:
            return move("healthy", f"clean through {waited:.0f} s of probation{note}", ev.reset())
        if reference:
            return move("probation", f"on probation; not demoted on {', '.join(reference)} alone: no independent "
                        f"test confirms it ({INDEPENDENT_TESTS})", ev)
        return move("probation", "clean round on probation", replace(ev, clean_rounds=ev.clean_rounds + 1))

    # healthy or suspect
    if confirm:
        return _confirmed(rnd, move, demote, failures)
    if rnd.demote:
        return demote(f"{', '.join(rnd.demote)}: {failures or peak} (demote at {settings.demote_e:g})", ev)
    # A probe that raised the alarm failing again in a fresh run is its confirmation.
    again = [r for r in rnd.failed if r.effect == "confirm" and r.probe in ev.suspects]
    if state == "suspect" and again:
        return demote(f"alarming probe failed again while suspect: {', '.join(map(_describe, again))}", ev)
    if rnd.alarms:
        suspects = _still_suspect((*ev.suspects, *rnd.alarms), rnd)
        why = f"alarm from {', '.join(rnd.alarms)}: {failures or peak} (suspect at {settings.suspect_e:g})"
        return move("suspect", why, replace(ev, suspects=suspects), suspects)
    if state == "suspect":  # the confirmatory round has not happened (or only errored): ask again
        suspects = ev.suspects or tuple(r.probe for r in rnd.quality)
        return move("suspect", "awaiting a confirmatory round", replace(ev, suspects=suspects), suspects)
    return move("healthy", f"clean round ({peak})", replace(ev, clean_rounds=ev.clean_rounds + 1))


def settles_confirmation(r: ProbeResult, alarming: Collection[str]) -> bool:
    """A confirmatory round's result after which no other result of the round can keep a healthy
    or suspect endpoint from DEMOTED (`_confirmed`): an alarming probe's re-run (or a hard rule)
    failing on the endpoint's own grounds is both the confirmation and the independent evidence a
    demotion needs."""
    return r.verdict == "fail" and r.grounds == "self" and (r.probe in alarming or r.effect == "demote")


def _confirmed(
    rnd: _Round, move: Callable[..., Decision], demote: Callable[..., Decision], failures: str
) -> Decision:
    """A confirmatory round: demote only when a probe that raised the alarm fails its own fresh
    re-run (or a hard rule fires), and something on the endpoint's own grounds failed (`demote`).
    Other probes of the round that fail keep the endpoint SUSPECT and become the alarm its next
    confirmatory round re-runs; everything passing restores it."""
    ev = rnd.evidence
    alarming = set(ev.suspects) or {r.probe for r in rnd.failed}
    confirmed = [r for r in rnd.failed if r.probe in alarming or r.effect == "demote"]
    if confirmed:
        return demote(f"confirmatory re-run failed: {', '.join(map(_describe, confirmed))}",
                      replace(ev, clean_rounds=0))
    # An alarm whose probe ran again and gave no verdict (errors, a re-check nobody answered) is
    # neither confirmed nor cleared: other probes passing do not answer it. One whose probe cannot
    # run any more (not applicable, its comparison gone) is cleared by the round, as before.
    answered = {r.probe for r in rnd.quality}
    unanswered = tuple(sorted((alarming - answered) & rnd.no_verdict))
    if rnd.failed:  # the alarm is not confirmed, but another test failed: that one is re-run next
        others = tuple(dict.fromkeys((*unanswered, *(r.probe for r in rnd.failed))))
        cusum = {p: m for p, m in ev.cusum.items() if p not in alarming or p in unanswered}
        passed = sorted(alarming & answered)
        why = f"alarm not confirmed ({', '.join(passed) or 'no re-run answered'} passed), but {failures}: still suspect"
        return move("suspect", why, replace(ev, cusum=cusum, clean_rounds=0, suspects=others), others)
    if unanswered:
        cusum = {p: m for p, m in ev.cusum.items() if p not in alarming or p in unanswered}
        why = f"awaiting a confirmatory verdict from {', '.join(unanswered)} (its re-run gave none)"
        return move("suspect", why, replace(ev, cusum=cusum, clean_rounds=0, suspects=unanswered), unanswered)
    return move("healthy", "confirmatory test passed: " + ", ".join(_describe(r) for r in rnd.quality), ev.reset())
