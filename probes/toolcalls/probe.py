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
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from probes.base import Effect, Outcome, ProbeContext, ProbeResult
from probes.budget import BudgetExhausted
from probes.client import ProbeUnavailable
from probes.toolcalls.cases import Case, Suite, load_suite
from probes.toolcalls.scoring import CaseOutcome, figures, judge, outcome_of
from probes.toolcalls.validator import SchemaCache

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.client import ProbeClient

PROBE = "toolcalls"


async def run_cases(
    client: ProbeClient,
    cases: Sequence[Case],
    *,
    concurrency: int,
    schemas: SchemaCache,
    progress: Any = None,
) -> tuple[dict[str, CaseOutcome], int]:
    """Each case's outcome (cases the endpoint failed to answer are left out) and the failures.
    Stops early, keeping what it has, when the budget is spent."""
    gate = asyncio.Semaphore(concurrency)
    outcomes: dict[str, CaseOutcome] = {}
    errors = 0
    done = 0
    spent = False

    async def one(case: Case) -> None:
        nonlocal errors, done, spent
        async with gate:
            if spent:
                return
            try:
                response = await client.chat(case.request())
            except ProbeUnavailable:
                errors += 1
            except BudgetExhausted:
                spent = True
            else:
                outcomes[case.id] = outcome_of(case, response, schemas)
            done += 1
            if progress is not None:
                progress(done, len(cases))

    await asyncio.gather(*(one(c) for c in cases))
    return {c.id: outcomes[c.id] for c in cases if c.id in outcomes}, errors


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
        client = ctx.client
        requests0, tokens0 = client.requests, client.tokens
        # The reference's missing cases run alongside the endpoint's (different machines, as a rule).
        (outcomes, errors), reference = await asyncio.gather(
            run_cases(client, cases, concurrency=settings.concurrency, schemas=self._schemas, progress=ctx.progress),
            self._reference(ctx, suite, cases),
        )
        tokens, requests = client.tokens - tokens0, client.requests - requests0
        if not outcomes:
            return ProbeResult(
                PROBE, "error", 0, tokens_spent=tokens, requests=requests, errors=errors, effect=self.effect,
                details={"reason": "no case was answered"},
            )
        expected = {c.id: c.expect_call for c in cases}
        reference = {cid: o for cid, o in reference.items() if cid in outcomes}
        truth = dict(expected)
        ref_fig = None
        if reference:
            truth.update({cid: o.triggered for cid, o in reference.items()})
            ref_fig = figures(reference.values(), expected)
        fig = figures(outcomes.values(), truth)
        verdict = judge(fig, ref_fig, settings, ctx.settings.health.tool_error_baseline)
        counts: Counter[str] = Counter()
        for o in outcomes.values():
            counts.update(o.counts)
        details: dict[str, Any] = {
            **verdict.details,
            "suite_version": suite.version,
            "truth": "reference" if reference else "expected",
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
        return ProbeResult.of(
            PROBE, verdict.verdict, outcome, effect=effect, tokens=tokens, requests=requests, errors=errors,
        )

    async def _reference(self, ctx: ProbeContext, suite: Suite, cases: Sequence[Case]) -> dict[str, CaseOutcome]:
        """The reference's frozen outcomes for these cases; runs (and stores) the ones it lacks."""
        ref = ctx.reference
        if ref is None or ref.endpoint_id == ctx.endpoint.id:
            return {}
        key = f"suite-v{suite.version}:{ctx.endpoint.model}"
        stored = await ctx.baselines.get(ref.endpoint_id, PROBE, key)
        known: dict[str, Mapping[str, Any]] = dict(stored["cases"]) if stored else {}
        missing = [c for c in cases if c.id not in known]
        if missing:
            fresh, _ = await run_cases(ref, missing, concurrency=ctx.settings.toolcalls.concurrency, schemas=self._schemas)
            if fresh:
                known.update({cid: o.stored() for cid, o in fresh.items()})
                await ctx.baselines.put(ref.endpoint_id, PROBE, key, {"cases": known}, at=ctx.clock())
        return {c.id: CaseOutcome.from_stored(c.id, known[c.id]) for c in cases if c.id in known}
