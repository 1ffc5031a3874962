"""Run probes against one endpoint, decide its health, and record it all.

A round: build each probe's `ProbeContext` (a `ProbeClient` for the endpoint and one for the
model's reference, never the endpoint itself), run the applicable probes one after another,
turn upstream failures and a spent budget into "error" results (availability evidence), store
the run, apply `probes.policy.decide` through `HealthStates.transition` (whose sinks publish and
persist it, like a manual demotion), and run the confirmatory round at once when the decision asks for one.
With a `probes.fleet.FleetLedger`, a proposed demotion also needs the fleet's e-BH over the audit
round to reject the endpoint (false discovery control across endpoints); held back, it stays suspect.

Progress goes to an `emit` callback as dicts: started, progress, result, transition, finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from gateway.catalog import Catalog, Endpoint
from gateway.health_states import HealthStates
from gateway.state_store import StoreUnavailable
from kernel.health import HealthState, Transition
from probes.base import ProbeContext, ProbeResult
from probes.baselines import BaselineStore
from probes.budget import BudgetExhausted, ProbeBudget
from probes.client import ProbeClient, ProbeUnavailable, UserHeaders, UserShape
from probes.consistency import UsageConsistency
from probes.deadline import AuditClock
from probes.evidence import EvidenceState, EvidenceStore
from probes.fleet import FleetLedger, audit_e
from probes.policy import Decision, decide, score_for, settles_confirmation
from probes.registry import ProbeMissing, ProbeRegistry
from probes.settings import ProbeSettings
from probes.tasks import OutOfTime, within
from probes.template_check import TemplateCheck, TemplateResult
from probes.template_check import check as check_template
from providers.http import HTTPClient, Timeouts

log = logging.getLogger("gateway.probes")

Emit = Callable[[dict[str, Any]], None]
ClientFactory = Callable[[Endpoint], ProbeClient]
# Seconds a probe stopped at the end of its time may take to unwind; one still running then is left behind.
STOP_GRACE_S = 5.0


class ProbeRunStore(Protocol):
    """Where probe runs, their results and the transitions they cause are stored
    (`gateway.persistence.probe_runs.SqlProbeRuns`); calls may raise when the database is away."""

    async def start_run(self, endpoint_id: str, suite: str, *, at: float, trigger: str) -> int: ...

    async def add_results(self, run_id: int, results: Sequence[ProbeResult], *, at: float) -> None: ...

    async def finish_run(
        self, run_id: int, verdict: str, *, at: float, tokens_spent: int, details: Mapping[str, Any]
    ) -> None: ...

    async def record_transition(self, t: Transition) -> object: ...


class ProbeMetrics(Protocol):
    """The one metric the runner reports (`gateway.metrics.GatewayMetrics`)."""

    def probe_outcome(self, endpoint_id: str, probe: str, verdict: str) -> None: ...


def _no_emit(event: dict[str, Any]) -> None:
    return None


def result_json(r: ProbeResult, *, confirm: bool) -> dict[str, Any]:
    return {
        "probe": r.probe,
        "verdict": r.verdict,
        "statistic": r.statistic,
        "p_value": r.p_value,
        "e_value": r.e_value,
        "samples": r.samples,
        "reference_samples": r.reference_samples,
        "tokens": r.tokens_spent,
        "requests": r.requests,
        "errors": r.errors,
        "effect": r.effect,
        "grounds": r.grounds,
        "confirm": confirm,
        "details": _plain(r.details or {}),
    }


def _plain(value: Any) -> Any:
    """JSON-safe copy of a result's details (numpy scalars and arrays included)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def transition_json(t: Transition) -> dict[str, Any]:
    return {"endpoint": t.endpoint_id, "from": t.from_state, "to": t.to_state, "reason": t.reason, "at": t.at,
            "score": t.score}


@dataclass
class RoundReport:
    confirm: bool
    results: list[ProbeResult]
    decision: Decision
    run_id: int | None = None
    transition: Transition | None = None


@dataclass
class RunReport:
    endpoint: Endpoint
    trigger: str
    rounds: list[RoundReport] = field(default_factory=list)
    state: str = "healthy"
    template: TemplateCheck | None = None

    @property
    def degraded(self) -> bool:
        """Not healthy now, or a failure that no passing confirmatory round cleared."""
        last = self.rounds[-1] if self.rounds else None
        return self.state != "healthy" or (last is not None and any(r.verdict == "fail" for r in last.results))

    def as_json(self) -> dict[str, Any]:
        return {
            "object": "probe.run",
            "endpoint": self.endpoint.id,
            "model": self.endpoint.model,
            "provider": self.endpoint.provider,
            "trigger": self.trigger,
            "state": self.state,
            "verdict": "fail" if self.degraded else "pass",
            "run_ids": [r.run_id for r in self.rounds if r.run_id is not None],
            "tokens": sum(x.tokens_spent for r in self.rounds for x in r.results),
            "results": [result_json(x, confirm=r.confirm) for r in self.rounds for x in r.results],
            "transitions": [transition_json(r.transition) for r in self.rounds if r.transition is not None],
            "template": self.template.as_json() if self.template is not None else None,
            "rounds": [
                {"run_id": r.run_id, "confirm": r.confirm, "reason": r.decision.reason,
                 "cusum": dict(r.decision.evidence.cusum)}
                for r in self.rounds
            ],
        }


def _counted(counts: Sequence[int | None]) -> bool:
    return bool(counts) and all(c is not None for c in counts)


class ProbeRunner:
    def __init__(
        self,
        *,
        catalog: Catalog,
        health: HealthStates,
        settings: ProbeSettings,
        registry: ProbeRegistry,
        evidence: EvidenceStore,
        baselines: BaselineStore,
        client_factory: ClientFactory,
        wall: Callable[[], float] = time.time,
        rng: np.random.Generator | None = None,
        persistence: ProbeRunStore | None = None,
        metrics: ProbeMetrics | None = None,
        fleet: FleetLedger | None = None,
    ) -> None:
        self.catalog = catalog
        self.health = health
        self.settings = settings
        self.registry = registry
        self.evidence = evidence
        self.baselines = baselines
        self.client_factory = client_factory
        self.wall = wall
        self.rng = rng or np.random.default_rng(settings.seed)
        self.persistence = persistence
        self.metrics = metrics
        # Gates demotions by e-BH over the fleet's round (probes.fleet); None: no fleet gate.
        self.fleet = fleet
        self._strays: set[asyncio.Task[Any]] = set()  # probes left running past their time (see _keep)

    def reference_for(self, endpoint: Endpoint) -> Endpoint | None:
        """The configured reference of the endpoint's model, else a local engine serving it; never itself."""
        configured = self.settings.references.get(endpoint.model)
        if configured is not None:
            ref = self.catalog.by_id.get(configured)
            if ref is None:
                log.warning("probes: the reference %r of %s is not in the catalog", configured, endpoint.model)
            return ref if ref is not None and ref.id != endpoint.id else None
        for ep in self.catalog.endpoints:
            if ep.region == "local" and ep.model == endpoint.model and ep.id != endpoint.id:
                return ep
        return None

    async def run(
        self, endpoint_id: str, probes: Sequence[str], *, trigger: str = "schedule", confirm: bool = False,
        emit: Emit = _no_emit,
    ) -> RunReport:
        endpoint = self.catalog.by_id[endpoint_id]
        report = RunReport(endpoint, trigger)
        clock = AuditClock.start(asyncio.get_running_loop().time(), self.settings.audit)
        emit({"event": "started", "endpoint": endpoint.id, "model": endpoint.model, "probes": list(probes),
              "trigger": trigger, "state": self.health.state(endpoint.id), "seconds": self.settings.audit.seconds})
        ref = self.reference_for(endpoint)
        if ref is not None and self.settings.template_check:
            # Bounded as a probe before all the round's probes, so it cannot take their time.
            by = clock.probe_end(asyncio.get_running_loop().time(), confirm=False, after=len(probes))
            report.template = await self.check_template(endpoint, ref, by=by)
            emit({"event": "template", "endpoint": endpoint.id, "reference": ref.id, **report.template.as_json()})
            if report.template.status == "differs":
                log.warning("probes: %s: %s", endpoint.id, report.template.reason)
        judge = TemplateResult().judge
        rendered = judge(report.template, endpoint, ref) if report.template is not None and ref is not None else None
        rnd = await self._round(endpoint, probes, clock, trigger=trigger, confirm=confirm, emit=emit,
                                template=report.template, rendered=rendered)
        report.rounds.append(rnd)
        if rnd.decision.confirm and not confirm:
            # The probes that failed on the endpoint's own grounds first: each can settle the round alone.
            own = {r.probe for r in rnd.results if r.verdict == "fail" and r.grounds == "self"}
            names = sorted(self.registry.confirmatory(rnd.decision.confirm_for), key=lambda n: n not in own)
            emit({"event": "confirm", "endpoint": endpoint.id, "probes": names, "reason": rnd.decision.reason})
            rendered, decides = None, report.template
            if report.template is not None and ref is not None:
                # A fresh check as the round's result (a template alarm's re-run; one nobody answered
                # leaves the alarm standing, probes.policy). Which probes meet the reference stays
                # the audit-start check's to say, as the endpoint controls its own counts, unless
                # the reference's counts moved since (its template changed mid-audit).
                again = await self.check_template(
                    endpoint, ref, by=clock.probe_end(asyncio.get_running_loop().time(), confirm=True, after=len(names)))
                emit({"event": "template", "endpoint": endpoint.id, "reference": ref.id, "confirm": True,
                      **again.as_json()})
                rendered = judge(again, endpoint, ref, rerun="template" in rnd.decision.confirm_for)
                if _counted(again.reference) and _counted(report.template.reference) \
                        and again.reference != report.template.reference:
                    decides = again
            report.rounds.append(await self._round(endpoint, names, clock, trigger=trigger, confirm=True, emit=emit,
                                                   template=decides, rendered=rendered))
        report.state = self.health.state(endpoint.id)
        emit({"event": "finished", **report.as_json()})
        return report

    async def check_template(self, endpoint: Endpoint, ref: Endpoint, *, by: float | None = None) -> TemplateCheck:
        """The audit-start check: the same messages' prompt_tokens on the endpoint and the reference,
        stopped at `by` (the event loop's clock) when given."""
        try:
            return await within(check_template(self.client_factory(endpoint), self.client_factory(ref)), by,
                                grace=STOP_GRACE_S)
        except OutOfTime as exc:
            self._keep(exc.stray, f"the template check of {endpoint.id}")
            return TemplateCheck("unknown", reason="the audit's time ran out before the check answered")
        except Exception as exc:  # a bug here must not stop the audit: the reference is then kept
            log.exception("probes: the template check of %s raised", endpoint.id)
            return TemplateCheck("unknown", reason=f"the check failed: {type(exc).__name__}: {exc}")

    async def _round(
        self, endpoint: Endpoint, probes: Sequence[str], clock: AuditClock, *, trigger: str, confirm: bool, emit: Emit,
        template: TemplateCheck | None = None, rendered: ProbeResult | None = None,
    ) -> RoundReport:
        """One round: the probes, each within its share of the audit's time, the usage-consistency
        check and the template result (`rendered`). A confirmatory round ends early at a result
        that settles it (`_settled`); the probes after it are reported unrun (`settled_by`: no
        verdict, so an alarm among them that the round did not demote on stays open)."""
        suite = ",".join(probes) + (" (confirm)" if confirm else "")
        at = self.wall()
        run_id = await self._db("start_run", lambda db: db.start_run(endpoint.id, suite, at=at, trigger=trigger))
        results = []
        traffic: list[tuple[str, int | None]] = []  # the endpoint's reported prompt_tokens, per prompt
        loop = asyncio.get_running_loop()
        settled_by: str | None = None
        for i, name in enumerate(probes):
            if settled_by is not None:
                results.append(self._report(endpoint, ProbeResult(name, "inconclusive", 0, details={
                    "settled_by": settled_by,
                    "reason": f"not run: the confirmatory round was settled by {settled_by}'s failure"}), confirm, emit))
                continue
            emit({"event": "probe", "endpoint": endpoint.id, "probe": name, "confirm": confirm})
            ends = clock.probe_end(loop.time(), confirm=confirm, after=len(probes) - i - 1)
            result = await self.run_probe(endpoint, name, confirm=confirm, emit=emit, template=template,
                                          traffic=traffic, ends=ends)
            results.append(self._report(endpoint, result, confirm, emit))
            if confirm and i < len(probes) - 1 and await self._settled(endpoint, results, result):
                settled_by = name
        if self.settings.consistency.enabled:
            checked = await self._consistency(endpoint, traffic, confirm=confirm)
            if checked is not None:
                results.append(self._report(endpoint, checked, confirm, emit))
        if rendered is not None:
            results.append(self._report(endpoint, rendered, confirm, emit))
        decision = await self._decide(endpoint, results, confirm=confirm, trigger=trigger)
        if self.fleet is not None:
            decision = await self._fleet_gate(self.fleet, endpoint, decision, results, confirm=confirm, trigger=trigger)
        rnd = RoundReport(confirm, results, decision, run_id if isinstance(run_id, int) else None)
        rnd.transition = await self._apply(endpoint, decision, results, rnd.run_id)
        if rnd.transition is not None:
            emit({"event": "transition", **transition_json(rnd.transition)})
        if rnd.run_id is not None:
            now = self.wall()
            run = rnd.run_id
            await self._db("add_results", lambda db: db.add_results(run, results, at=now))
            verdict = "fail" if any(r.verdict == "fail" for r in results) else (
                "pass" if any(r.verdict == "pass" for r in results) else "error" if any(
                    r.verdict == "error" for r in results) else "inconclusive")
            details = {"state": self.health.state(endpoint.id), "reason": decision.reason, "confirm": confirm,
                       "transition": transition_json(rnd.transition) if rnd.transition else None}
            tokens = sum(r.tokens_spent for r in results)
            await self._db(
                "finish_run", lambda db: db.finish_run(run, verdict, at=now, tokens_spent=tokens, details=details)
            )
        return rnd

    async def _settled(self, endpoint: Endpoint, results: Sequence[ProbeResult], last: ProbeResult) -> bool:
        """Whether a confirmatory round may stop at `last`: it settles the policy's decision for a
        healthy or suspect endpoint (`probes.policy.settles_confirmation`, with the alarming probes
        the decision will read from the evidence store), and the fleet's gate, if any, would admit
        the demotion on the round's results so far times the least the round's own checks still to
        come can multiply them by. Stopping there keeps the fleet's e-values valid (a product of
        e-values stopped on what it has seen is one) and saves the rest of the round."""
        health = self.health.get(endpoint.id)
        if health.manual or health.state not in ("healthy", "suspect"):
            return False
        try:
            evidence = await self.evidence.get(endpoint.id)
        except (StoreUnavailable, ValueError):
            return False  # the round runs whole
        alarming = set(evidence.suspects) or {r.probe for r in results if r.verdict == "fail"}
        if not settles_confirmation(last, alarming):
            return False
        if self.fleet is None or last.effect == "demote":  # a hard rule is not gated
            return True
        # The usage-consistency check passing at p = 1 is the most the checks after the probes can take off.
        still = [ProbeResult("consistency", "pass", 0, p_value=1.0,
                             details={"fleet_weight": self.settings.consistency.fleet_weight})]
        slack = audit_e(still if self.settings.consistency.enabled else [], self.fleet.settings.kappa)
        try:
            return await self.fleet.would_admit(endpoint.id, results, now=self.wall(), slack=slack)
        except (StoreUnavailable, ValueError):
            return False

    def _report(self, endpoint: Endpoint, result: ProbeResult, confirm: bool, emit: Emit) -> ProbeResult:
        if self.metrics is not None:
            self.metrics.probe_outcome(endpoint.id, result.probe, result.verdict)
        emit({"event": "result", "endpoint": endpoint.id, **result_json(result, confirm=confirm)})
        return result

    async def _consistency(
        self, endpoint: Endpoint, traffic: Sequence[tuple[str, int | None]], *, confirm: bool
    ) -> ProbeResult | None:
        """The round's usage-consistency check: off the event loop (its first scipy import takes a
        second), and a bug in it is an error result, never the round's end."""
        check = UsageConsistency()
        try:
            return await asyncio.to_thread(check.judge, list(traffic), self.settings, confirm=confirm)
        except Exception as exc:
            log.exception("probes: the usage-consistency check on %s raised", endpoint.id)
            return ProbeResult(check.name, "error", 0, effect=check.effect,
                               details={"error": f"{type(exc).__name__}: {exc}"})

    async def run_probe(
        self, endpoint: Endpoint, name: str, *, confirm: bool, emit: Emit = _no_emit,
        template: TemplateCheck | None = None, traffic: list[tuple[str, int | None]] | None = None,
        ends: float | None = None,
    ) -> ProbeResult:
        """One probe, never raising: a missing module, an inapplicable endpoint, an unreachable
        upstream, a spent budget, the end of its time (`ends`, the event loop's clock: it is
        stopped then, with everything it started) or a bug in the probe all come back as a result
        that says so.
        With a `template` check that found the reference rendering differently, the probe runs
        without the reference (against the endpoint's own history), and its details say why.
        `traffic` gets the endpoint's (prompt, reported prompt_tokens) pairs, for the round's
        usage-consistency check."""
        try:
            # A probe module's first import (numpy, scipy) takes seconds: not on the event loop.
            probe = (await asyncio.to_thread(self.registry.factory, name))()
        except ProbeMissing as exc:
            return ProbeResult(name, "error", 0, details={"error": str(exc)})
        why_not = probe.applicable(endpoint)
        if why_not is not None:
            return ProbeResult(name, "inconclusive", 0, effect=probe.effect, details={"skipped": why_not})
        loop = asyncio.get_running_loop()
        if ends is not None and ends <= loop.time():
            return ProbeResult(name, "inconclusive", 0, effect=probe.effect, details={
                "out_of_time": True, "reason": f"no time left in the audit (probes.audit.seconds = {self.settings.audit.seconds:g})"})
        client = self.client_factory(endpoint)
        ref = self.reference_for(endpoint)
        skipped = template.reason if template is not None and template.status == "differs" and ref is not None else None
        if skipped is not None:
            ref = None
        ref_client = self.client_factory(ref) if ref is not None else None

        def progress(done: int, total: int) -> None:
            emit({"event": "progress", "endpoint": endpoint.id, "probe": name, "done": done, "total": total})

        ctx = ProbeContext(
            endpoint=endpoint, client=client, settings=self.settings, baselines=self.baselines,
            rng=np.random.default_rng(self.rng.integers(2**63)), clock=self.wall, reference=ref_client,
            progress=progress, confirm=confirm, template=template.status if template is not None else None,
            deadline=ends,
        )
        started = time.perf_counter()
        try:
            result = await within(probe.run(ctx), ends, grace=STOP_GRACE_S)
        except OutOfTime as exc:
            self._keep(exc.stray, f"{name} on {endpoint.id}")
            result = ProbeResult(name, "inconclusive", 0, effect=probe.effect, details={
                "out_of_time": True,
                "reason": f"the audit's time ran out: stopped after {time.perf_counter() - started:.0f} s, the "
                          f"end of its share (probes.audit.seconds = {self.settings.audit.seconds:g})"})
        except (ProbeUnavailable, BudgetExhausted) as exc:
            result = ProbeResult(name, "error", 0, effect=probe.effect, errors=max(1, client.errors),
                                 details={"error": str(exc)})
        except Exception as exc:  # a probe's bug must not stop the round or the scheduler
            log.exception("probes: %s on %s raised", name, endpoint.id)
            result = ProbeResult(name, "error", 0, effect=probe.effect, details={"error": f"{type(exc).__name__}: {exc}"})
        if traffic is not None:
            traffic.extend(getattr(client, "prompt_counts", ()))
        spent = client.tokens + (ref_client.tokens if ref_client is not None else 0)
        requests = client.requests + (ref_client.requests if ref_client is not None else 0)
        details = {**(result.details or {}), "seconds": round(time.perf_counter() - started, 3),
                   "reference": ref.id if ref is not None else None}
        if skipped is not None:
            details["reference_skipped"] = skipped
        return ProbeResult(
            probe=result.probe, verdict=result.verdict, samples=result.samples, statistic=result.statistic,
            p_value=result.p_value, e_value=result.e_value, reference_samples=result.reference_samples,
            tokens_spent=max(result.tokens_spent, spent), details=details, effect=result.effect,
            requests=max(result.requests, requests), errors=max(result.errors, client.errors),
            grounds=result.grounds,
        )

    def _keep(self, stray: asyncio.Task[Any] | None, what: str) -> None:
        """A probe that ignored every cancel for STOP_GRACE_S: kept referenced (the loop holds tasks
        weakly) until it ends, and said loudly, since it may still be sending."""
        if stray is None:
            return
        log.error("probes: %s ignored its cancels for %.0f s at the end of its time and was left running",
                  what, STOP_GRACE_S)
        self._strays.add(stray)
        stray.add_done_callback(self._strays.discard)

    async def _decide(self, endpoint: Endpoint, results: list[ProbeResult], *, confirm: bool, trigger: str) -> Decision:
        try:
            evidence = await self.evidence.get(endpoint.id)
        except (StoreUnavailable, ValueError) as exc:
            log.warning("probes: evidence of %s unreadable (%s); deciding on this round alone", endpoint.id, exc)
            evidence = EvidenceState()
        decision = decide(self.health.get(endpoint.id), evidence, results, confirm=confirm, now=self.wall(),
                          settings=self.settings.health, trigger=trigger)
        try:
            await self.evidence.put(endpoint.id, decision.evidence)
        except StoreUnavailable as exc:
            log.warning("probes: could not store the evidence of %s: %s", endpoint.id, exc)
        return decision

    async def _fleet_gate(
        self, fleet: FleetLedger, endpoint: Endpoint, decision: Decision, results: list[ProbeResult], *,
        confirm: bool, trigger: str,
    ) -> Decision:
        """Record a fresh round's evidence (an audit's or a confirmatory round's) in the fleet's round,
        and let a proposed demotion through only when the fleet's e-BH rejects this endpoint; held
        back, the endpoint stays SUSPECT (or on probation) and a confirmatory round is asked for."""
        state = self.health.state(endpoint.id)
        try:
            if confirm or trigger != "schedule":
                await fleet.record(endpoint.id, results, now=self.wall())
        except StoreUnavailable as exc:  # this round's evidence is lost to the fleet; the gate below still holds
            log.warning("probes: could not record %s in the fleet's round: %s", endpoint.id, exc)
        if decision.to_state != "demoted" or state == "demoted":
            return decision
        if any(r.verdict == "fail" and r.effect == "demote" for r in results):
            return replace(decision, reason=f"{decision.reason} (a hard rule: not gated by the fleet's e-BH)")
        try:
            gate = await fleet.gate(endpoint.id, now=self.wall())
        except StoreUnavailable as exc:
            # Fails closed: an ungated demotion would escape the fleet's FDR bound; held, it is gated again.
            log.warning("probes: the fleet's round is unavailable (%s): the gate fails closed, %s is held",
                        exc, endpoint.id)
            return self._held(decision, state, results, confirm, f"the fleet's round is unavailable ({exc})")
        if gate.allowed:
            return replace(decision, reason=f"{decision.reason}; {gate.describe()}")
        return self._held(decision, state, results, confirm, gate.describe())

    def _held(self, decision: Decision, state: HealthState, results: list[ProbeResult], confirm: bool,
              why: str) -> Decision:
        """A demotion the fleet's gate holds back: SUSPECT (probation stays), a confirmatory round asked for."""
        hold: HealthState = "suspect" if state in ("healthy", "suspect") else state
        again = () if confirm else (
            decision.evidence.suspects or tuple(dict.fromkeys(r.probe for r in results if r.verdict == "fail")))
        return Decision(None if hold == state else hold, decision.evidence, f"{decision.reason}; {why}: {hold}, not demoted",
                        None if hold == state else score_for(hold, self.settings.health), again)

    async def _apply(
        self, endpoint: Endpoint, decision: Decision, results: list[ProbeResult], run_id: int | None
    ) -> Transition | None:
        if decision.to_state is None:
            return None
        evidence = {
            "run_id": run_id,
            "cusum": dict(decision.evidence.cusum),
            "results": [{"probe": r.probe, "verdict": r.verdict, "p_value": r.p_value, "e_value": r.e_value,
                         "statistic": r.statistic, "effect": r.effect, "grounds": r.grounds} for r in results],
        }
        t = await self.health.transition(endpoint.id, decision.to_state, source="probe", reason=decision.reason,
                                         at=self.wall(), score=decision.score, evidence=evidence)
        if t is None:
            return None
        level = logging.WARNING if t.to_state in ("demoted", "suspect") else logging.INFO
        log.log(level, "probes: %s %s -> %s: %s", endpoint.id, t.from_state, t.to_state, t.reason)
        if t.to_state == "demoted":
            self._warn_if_last(endpoint)
        return t

    def _warn_if_last(self, endpoint: Endpoint) -> None:
        siblings = [ep for ep in self.catalog.candidates(endpoint.model) if ep.id != endpoint.id]
        if not any(self.health.routable(ep.id) for ep in siblings):
            log.warning(
                "probes: %s was the last routable endpoint of model %s; every endpoint of it is demoted, so the "
                "gateway FAILS OPEN and keeps routing %s to demoted endpoints (x-gateway-fail-open: health_demoted)",
                endpoint.id, endpoint.model, endpoint.model,
            )

    async def _db(self, what: str, call: Callable[[ProbeRunStore], Awaitable[Any]]) -> Any:
        """A probe-run write (off the event loop, in the store); a database failure is logged, never raised."""
        if self.persistence is None:
            return None
        try:
            return await call(self.persistence)
        except Exception as exc:
            log.warning("probes: could not store the probe run (%s): %s", what, str(exc).split("\n")[0])
            return None


def make_client_factory(
    http: HTTPClient,
    settings: ProbeSettings,
    budget: ProbeBudget,
    shape: UserShape | None = None,
    headers: UserHeaders | None = None,
) -> ClientFactory:
    """Probe clients as a user's requests reach each endpoint; a reference on llama.cpp's server
    (the configured references and the gateway's own engines) evaluates every prompt afresh."""
    t = settings.request_timeout
    timeouts = Timeouts(connect=min(10.0, t), first_byte=t, between_chunks=t, total=t)
    hooks: dict[str, Any] = {"shape": shape, "headers": headers}
    hooks = {name: hook for name, hook in hooks.items() if hook is not None}
    references = set(settings.references.values())

    def factory(endpoint: Endpoint) -> ProbeClient:
        # The gateway's own engines are the supervised ones (only they have a readiness check).
        ours = endpoint.id in references or endpoint.ready is not None
        if endpoint.kind == "llamacpp" and ours:
            return ProbeClient(endpoint, http, timeouts, budget, **{**hooks, "shape": uncached(shape)}, fresh=True)
        return ProbeClient(endpoint, http, timeouts, budget, **hooks)

    return factory


def uncached(shape: UserShape | None) -> UserShape:
    """`shape`, and llama-server's `cache_prompt: false` on requests that read logprobs: its T=0
    logprobs of a prompt move with the cached prefix it reuses (computed in another batch shape: up
    to 0.32 nats after long prompts, bench/reference_cache_state.py), and an equality test must not
    see the server's own history. Only there (a multi-turn agent eval re-evaluated in full at every
    step would cost its prompt again and again), and only for references and the gateway's own
    engines, whose traffic no provider sees: an audited provider gets its requests as a user's."""

    def fresh(op: str, body: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
        own = shape(op, body, endpoint) if shape is not None else {}
        reads_logprobs = bool(body.get("logprobs")) and op in ("chat", "completions")
        return {**own, "cache_prompt": False} if reads_logprobs else own

    return fresh
