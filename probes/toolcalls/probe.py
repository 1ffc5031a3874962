"""The active tool-call probe: run the fixed suite (or `cases` sampled with the context's RNG)
against the endpoint, and judge it against the reference engine's frozen self-run of the same
cases (`scoring`). Without a reference, the cases' expected behaviour is the truth and the pass
marks are fixed floors.

The reference self-run is frozen per model in the baseline store (written once; cases sampled
later that it lacks are run on the reference and added). Only compact per-case outcomes are
stored, never responses.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from probes.base import Effect, Outcome, ProbeContext, ProbeResult, Verdict
from probes.budget import BudgetExhausted
from probes.client import ProbeRejected, ProbeUnavailable
from probes.deadline import stop_at
from probes.tasks import cancel_all, gather_or_cancel
from probes.toolcalls.cases import Case, Suite, load_suite
from probes.toolcalls.scoring import CaseOutcome, figures, judge, outcome_of, truth_of
from probes.toolcalls.validator import SchemaCache

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.client import ProbeClient

PROBE = "toolcalls"


@dataclass
class CaseRun:
    """What one side of the suite gave: each answered case's outcome, and what was left out why."""

    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    errors: int = 0
    rejected: list[str] = field(default_factory=list)  # cases this side refused to serve (4xx)
    unanswered: int = 0  # cases neither answered, refused nor failed: time or budget ran out
    out_of_time: bool = False
    budget_spent: bool = False
    latency: float | None = None  # median seconds per answered request
    concurrency: int = 0  # the most requests it had at once


async def run_cases(
    client: ProbeClient,
    cases: Sequence[Case],
    *,
    concurrency: int,
    schemas: SchemaCache,
    progress: Any = None,
    time_budget: float | None = None,
    max_concurrency: int | None = None,
    until: float | None = None,
) -> CaseRun:
    """Run the cases, `concurrency` at a time, more (up to `max_concurrency`) when the measured
    latency says they would not all finish within `time_budget` seconds from now or by `until`
    (the event loop's clock), whichever comes first; each request is bounded by the time left.
    Stops early, keeping what it has, when the budget or the time is spent. Whatever raises out of
    here (a bug, a cancel) first cancels every request it started."""
    loop = asyncio.get_running_loop()
    ends = [t for t in (loop.time() + time_budget if time_budget is not None else None, until) if t is not None]
    deadline = min(ends) if ends else None
    pending = deque(cases)
    run = CaseRun()
    latencies: list[float] = []
    workers: list[asyncio.Task[None]] = []
    done = 0

    async def worker() -> None:
        nonlocal done
        while pending and not (run.budget_spent or run.out_of_time):
            case = pending.popleft()
            began = loop.time()
            try:
                async with asyncio.timeout_at(deadline):
                    response = await client.chat(case.request())
            except TimeoutError:
                if deadline is None or loop.time() < deadline:
                    raise  # not our deadline's
                run.out_of_time = True
                return
            except ProbeRejected:
                run.rejected.append(case.id)
            except ProbeUnavailable:
                run.errors += 1
            except BudgetExhausted:
                run.budget_spent = True
                return
            else:
                run.outcomes[case.id] = outcome_of(case, response, schemas)
                latencies.append(loop.time() - began)
            done += 1
            if progress is not None:
                progress(done, len(cases))
            grow()

    def grow() -> None:
        """Enough workers to finish what is left in 80% of the time left, at the median latency."""
        if deadline is None or not latencies or not pending:
            return
        left = deadline - loop.time()
        want = math.ceil(len(pending) * statistics.median(latencies) / max(0.8 * left, 1e-3))
        cap = min(max_concurrency or concurrency, len(pending))
        while sum(not w.done() for w in workers) < min(want, cap):
            workers.append(loop.create_task(worker()))
        run.concurrency = max(run.concurrency, sum(not w.done() for w in workers))

    workers.extend(loop.create_task(worker()) for _ in range(min(concurrency, len(cases))))
    run.concurrency = len(workers)
    try:
        while live := [w for w in workers if not w.done()]:
            await asyncio.wait(live, return_when=asyncio.FIRST_COMPLETED)
            for w in workers:
                if w.done() and not w.cancelled() and w.exception() is not None:
                    raise w.exception()  # type: ignore[misc]
    finally:
        await cancel_all(workers)  # on a raise or a cancel: nothing of this side keeps sending
    run.outcomes = {c.id: run.outcomes[c.id] for c in cases if c.id in run.outcomes}
    run.unanswered = len(cases) - len(run.outcomes) - run.errors - len(run.rejected)
    run.latency = statistics.median(latencies) if latencies else None
    return run


class ToolCallProbe:
    name: ClassVar[str] = PROBE
    effect: ClassVar[Effect] = "confirm"

    def __init__(self, suite: Suite | None = None, schemas: SchemaCache | None = None) -> None:
        self._suite = suite
        self._schemas = schemas or SchemaCache()

    @property
    def suite(self) -> Suite:
        if self._suite is None:
            self._suite = load_suite()
        return self._suite

    def applicable(self, endpoint: Endpoint) -> str | None:
        if not endpoint.deployment.capabilities.tools:
            return "the deployment does not declare tool support"
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        settings = ctx.settings.toolcalls
        if ctx.confirm:  # a confirmatory round judges at the stricter confirm_alpha
            settings = settings.model_copy(update={"alpha": min(settings.alpha, ctx.settings.health.confirm_alpha)})
        suite = self.suite
        cases = suite.sample(settings.cases, ctx.rng)
        # Sent in a fresh order each run: a fixed sequence of known prompts would mark the suite.
        cases = tuple(cases[i] for i in ctx.rng.permutation(len(cases)))
        client = ctx.client
        requests0, tokens0 = client.requests, client.tokens
        began = asyncio.get_running_loop().time()
        until = stop_at(ctx.deadline)
        # The reference's missing cases run alongside the endpoint's (different machines, as a rule);
        # either side raising cancels the other.
        mine, (reference, ref_rejected) = await gather_or_cancel(
            run_cases(client, cases, concurrency=settings.concurrency, schemas=self._schemas, progress=ctx.progress,
                      time_budget=settings.time_budget, max_concurrency=settings.max_concurrency, until=until),
            self._reference(ctx, suite, cases, until),
        )
        outcomes, errors = mine.outcomes, mine.errors
        tokens, requests = client.tokens - tokens0, client.requests - requests0
        # A case the reference cannot serve has no truth to compare with: dropped, and counted.
        dropped = {"reference_rejected": sorted(ref_rejected), "endpoint_rejected": sorted(mine.rejected)}
        outcomes = {cid: o for cid, o in outcomes.items() if cid not in ref_rejected}
        run_details = {"dropped": dropped, "unanswered": mine.unanswered, "concurrency": mine.concurrency,
                       "latency_s": round(mine.latency, 3) if mine.latency is not None else None}
        if mine.out_of_time:
            run_details["out_of_time"] = True
            run_details["reason"] = (
                f"time ran out: {len(mine.outcomes)} of {len(cases)} cases answered within "
                f"{asyncio.get_running_loop().time() - began:.0f} s "
                f"(median latency {run_details['latency_s']} s at up to {mine.concurrency} at once)")
        if not outcomes:
            verdict_now: Verdict = "inconclusive" if mine.out_of_time or mine.rejected or ref_rejected else "error"
            return ProbeResult(
                PROBE, verdict_now, 0, tokens_spent=tokens, requests=requests, errors=errors, effect=self.effect,
                details={"reason": "no case was answered", **run_details},
            )
        expected = {c.id: c.expect_call for c in cases}
        reference = {cid: o for cid, o in reference.items() if cid in outcomes}
        reference_judged = sum(o.judged for o in reference.values())
        # Too few answers it finished to be the truth of which cases call (the suite's own then);
        # its error rate still counts (an honest engine may err as it does): scoring.judge.
        by_reference = reference_judged >= settings.min_calls
        truth = truth_of(expected, reference if by_reference else {})
        ref_fig = figures(reference.values(), expected) if reference else None
        fig = figures(outcomes.values(), truth)
        verdict = judge(fig, ref_fig, settings, ctx.settings.health.tool_error_baseline)
        counts: Counter[str] = Counter()
        for o in outcomes.values():
            counts.update(o.counts)
        details: dict[str, Any] = {
            **verdict.details,
            **run_details,
            "suite_version": suite.version,
            "truth": "reference" if by_reference else "expected",
            "reference_judged": reference_judged,
            "f1_vs_expected": figures(outcomes.values(), expected).f1,
            "counts": dict(counts),
            "reasons": list(verdict.reasons),
            "bad_cases": sorted(cid for cid, o in outcomes.items() if o.bad),
        }
        outcome = Outcome(
            statistic=fig.error_rate if fig.error_rate is not None else 0.0,
            p_value=verdict.p_value,
            samples=fig.judged,
            reference_samples=ref_fig.judged if ref_fig else None,
            details=details,
        )
        effect: Effect = "demote" if verdict.demote and verdict.verdict == "fail" else self.effect
        final = verdict.verdict
        if mine.out_of_time and fig.judged < settings.min_calls:
            final = "inconclusive"  # too few answered in time to judge: say so, not pass
        return ProbeResult.of(
            PROBE, final, outcome, effect=effect, tokens=tokens, requests=requests, errors=errors,
            grounds=verdict.grounds,
        )

    async def _reference(
        self, ctx: ProbeContext, suite: Suite, cases: Sequence[Case], until: float | None
    ) -> tuple[dict[str, CaseOutcome], set[str]]:
        """The reference's frozen outcomes for these cases, and those it cannot serve; runs (and
        stores) the ones it lacks."""
        ref = ctx.reference
        if ref is None or ref.endpoint_id == ctx.endpoint.id:
            return {}, set()
        key = f"suite-v{suite.version}:{ctx.endpoint.model}"
        stored = await ctx.baselines.get(ref.endpoint_id, PROBE, key)
        known: dict[str, Mapping[str, Any]] = dict(stored["cases"]) if stored else {}
        refused: set[str] = set(stored.get("rejected") or ()) if stored else set()
        missing = [c for c in cases if c.id not in known and c.id not in refused]
        if missing:
            t = ctx.settings.toolcalls
            fresh = await run_cases(ref, missing, concurrency=t.concurrency, schemas=self._schemas,
                                    time_budget=t.time_budget, max_concurrency=t.max_concurrency, until=until)
            if fresh.outcomes or fresh.rejected:
                known.update({cid: o.stored() for cid, o in fresh.outcomes.items()})
                refused.update(fresh.rejected)
                await ctx.baselines.put(ref.endpoint_id, PROBE, key, {"cases": known, "rejected": sorted(refused)},
                                        at=ctx.clock())
        ids = {c.id for c in cases}
        return {c.id: CaseOutcome.from_stored(c.id, known[c.id]) for c in cases if c.id in known}, refused & ids
