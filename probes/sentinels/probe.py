"""The `sentinels` probe: usage counts, needle retrieval and loops in one daily run.

A confirmed truncation (the needle pattern, or usage flattening where retrieval was lost) is a
hard rule: effect "demote" (a needle pattern that forgave a lost cell as noise only in its
confirmatory re-run). Any other failure (counts off the line or off the reference's,
retrieval lost without the pattern, excess loops) makes the endpoint suspect. Each check is judged
against the reference when there is one, else against the endpoint's own frozen baseline (written
once, by its first clean run), else on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from gateway.routing.tokens import TokenCounter
from probes.base import Effect, Outcome, ProbeContext, ProbeResult, Verdict
from probes.sentinels import loops, needle, usage
from probes.sentinels.sampling import Sampler, answer_text
from probes.sentinels.settings import SentinelSettings
from probes.tasks import gather_or_cancel
from probes.template_check import same_weights

if TYPE_CHECKING:
    from gateway.catalog import Endpoint

SUSPECT_FINDINGS = {
    "usage": {"flattened", "excess", "flat"},
    "usage_comparison": {"mismatch"},
    "needle": {"degraded", "truncation"},
    "loops": {"loops"},
}
# Findings that only say "not equal to the reference" (a failure of those alone is reference-grounded).
REFERENCE_FINDINGS = {"usage_comparison:mismatch"}


def _renders_alike(ctx: ProbeContext) -> bool:
    """Counts unequal to the reference's alone: another engine's template can do that, unless both
    serve the same weights (one tokenizer) and the audit-start check saw them render alike."""
    return (ctx.template == "same" and ctx.reference is not None
            and same_weights(ctx.endpoint, ctx.reference.endpoint))


class SentinelsProbe:
    name: ClassVar[str] = "sentinels"
    effect: ClassVar[Effect] = "suspect"

    def __init__(self, settings: SentinelSettings | None = None, counter: TokenCounter | None = None) -> None:
        self._explicit = settings
        self.settings = settings or SentinelSettings()
        self._counter = counter or TokenCounter()

    def applicable(self, endpoint: Endpoint) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        # The config's `probes.sentinels` section, unless this probe was built with its own.
        s = self.settings = self._explicit or ctx.settings.sentinels
        mine = Sampler(ctx.client, concurrency=s.concurrency, progress=ctx.progress)
        ref = Sampler(ctx.reference, concurrency=s.concurrency) if ctx.reference is not None else None
        saved = {k: await ctx.baselines.get(ctx.endpoint.id, self.name, k) for k in ("usage", "needle", "loops")}

        fit = await asyncio.to_thread(usage.fit_bodies, s.usage.fit_sizes, self._counter.count_text)
        (fit_pts, _), ref_fit = await _both(mine, ref, lambda sm: usage.sample_points(sm, fit, self._counter.count_chat))
        # The reference's counts size the needles when there is one: same tokenizer, and sizes
        # that do not move with the endpoint's faults.
        sizing = ref_fit[0] if ref_fit is not None else fit_pts
        sizes, cells, needle_pts, ref_needle_pts = await self._needles(ctx, mine, ref, sizing, saved["needle"])
        loop_cells, ref_loop_cells = await self._loops(mine, ref)

        checks: dict[str, Outcome] = {}
        u = s.usage
        checks["usage"] = usage.check_linear(
            fit_pts, needle_pts, rel_tolerance=u.rel_tolerance, abs_tolerance=u.abs_tolerance, min_slope=u.min_slope
        )
        observed = {p.label: p.reported for p in [*fit_pts, *needle_pts]}
        if ref_fit is not None:
            expected_counts: Mapping[str, Any] = {p.label: p.reported for p in [*ref_fit[0], *ref_needle_pts]}
        else:
            expected_counts = (saved["usage"] or {}).get("counts", {})
        checks["usage_comparison"] = usage.compare_counts(observed, expected_counts, tolerance=u.abs_tolerance)
        checks["needle"] = needle.judge_retrieval(cells, min_lost=s.needle.min_lost, noise_cells=s.needle.noise_cells)
        lp = s.loops
        expected_loops = (
            {c.key: c for c in ref_loop_cells}
            if ref_loop_cells is not None
            else {k: loops.LoopCell(k, *v) for k, v in ((saved["loops"] or {}).get("cells") or {}).items()} or None
        )
        checks["loops"] = loops.loop_test(
            loop_cells, expected_loops, floor=lp.floor, answer_floor=lp.answer_floor,
            informative_below=lp.informative_below,
            alpha=min(lp.alpha, ctx.settings.health.confirm_alpha) if ctx.confirm else lp.alpha,
        )

        verdict, effect, findings, truncation = _decide(checks, mine, confirm=ctx.confirm)
        if verdict == "pass":
            await self._freeze(ctx, saved, fit_pts, sizes, cells, loop_cells)
        return ProbeResult(
            probe=self.name,
            verdict=verdict,
            samples=mine.requests - mine.errors,
            statistic=checks["needle"].statistic,
            p_value=checks["loops"].p_value,
            reference_samples=(ref.requests - ref.errors) if ref else None,
            tokens_spent=mine.tokens,
            effect=effect,
            requests=mine.requests,
            errors=mine.errors,
            grounds="reference" if ref is not None and verdict == "fail" and not truncation and findings
            and set(findings) <= REFERENCE_FINDINGS and not _renders_alike(ctx) else "self",
            details={
                "findings": findings,
                "truncation": truncation,
                "judged_against": "reference" if ref else "baseline" if any(saved.values()) else "self",
                "usage": {**checks["usage"].details, "comparison": dict(checks["usage_comparison"].details)},
                "needle": {**checks["needle"].details, "sizes": sizes, "window": ctx.endpoint.deployment.context_window},
                "loops": {**checks["loops"].details, "share": checks["loops"].statistic, "p_value": checks["loops"].p_value,
                          "seeds": [lp.seed, lp.seed + lp.samples - 1] if lp.samples and lp.sampled_prompts else []},
                "tokens": {"endpoint": mine.tokens, "reference": ref.tokens if ref else 0},
            },
        )

    async def _needles(
        self, ctx: ProbeContext, mine: Sampler, ref: Sampler | None, fit_pts: Sequence[usage.UsagePoint],
        saved: Mapping[str, Any] | None,
    ) -> tuple[list[int], list[needle.NeedleCell], list[usage.UsagePoint], list[usage.UsagePoint]]:
        n = self.settings.needle
        reported = [p for p in fit_pts if p.reported is not None]
        slope, intercept = (
            usage.fit_line([p.local for p in reported], [p.reported or 0 for p in reported])
            if len(reported) >= 2
            else (needle.FALLBACK_SLOPE, needle.FALLBACK_INTERCEPT)
        )
        if slope < self.settings.usage.min_slope:  # counts that do not grow cannot size anything
            slope, intercept = needle.FALLBACK_SLOPE, needle.FALLBACK_INTERCEPT
        sizes = needle.plan_sizes(
            ctx.endpoint.deployment.context_window, slope=slope, intercept=max(0.0, intercept), max_tokens=n.max_tokens,
            margin_tokens=n.margin_tokens, margin_share=n.margin_share, min_size=n.min_size, shrink=n.shrink,
            cap=n.max_prompt_tokens, upper_shares=n.upper_shares,
        )
        plan = await asyncio.to_thread(
            needle.build_bodies, sizes, n.depths, ctx.rng, self._counter.count_text, digits=n.code_digits,
            max_tokens=n.max_tokens,
        )
        labelled = [(f"needle:{size}@{depth}", body) for size, depth, _, body in plan]
        (pts, answers), ref_out = await _both(
            mine, ref, lambda sm: usage.sample_points(sm, labelled, self._counter.count_chat)
        )

        def found(answer: dict[str, Any] | None, code: str) -> bool | None:
            return None if answer is None else needle.retrieved(answer_text(answer)[0], code)

        ref_found = [found(a, code) for a, (_, _, code, _) in zip(ref_out[1], plan, strict=True)] if ref_out else None
        frozen = (saved or {}).get("found") if saved and list(saved.get("sizes") or []) == sizes else None
        cells = []
        for i, ((size, depth, code, _), answer) in enumerate(zip(plan, answers, strict=True)):
            if ref_found is not None:
                expected = ref_found[i]
            elif frozen is not None:
                expected = frozen.get(f"{size}@{depth}")
            else:
                expected = True
            cells.append(needle.NeedleCell(size, depth, found(answer, code), expected))
        return sizes, cells, pts, (ref_out[0] if ref_out else [])

    async def _loops(
        self, mine: Sampler, ref: Sampler | None
    ) -> tuple[list[loops.LoopCell], list[loops.LoopCell] | None]:
        lp = self.settings.loops
        plan = loops.loop_plan(
            lp.prompts, repeats=lp.repeats, sampled_prompts=lp.sampled_prompts, samples=lp.samples,
            temperature=lp.temperature, seed=lp.seed, max_tokens=lp.max_tokens, system=lp.system,
        )
        ref_plan = loops.reference_plan(plan)

        def looped(answer: dict[str, Any] | None) -> bool | None:
            if answer is None:
                return None
            text, finish = answer_text(answer)
            return loops.is_loop(text, finish, threshold=lp.repetition, word_n=lp.ngram, char_n=lp.char_ngram)

        async def send(sm: Sampler, p: Sequence[loops.LoopRequest]) -> list[loops.LoopCell]:
            answers = await sm.chat_many([r.body for r in p])
            return loops.tally(p, [looped(a) for a in answers])

        if ref is None:
            return await send(mine, plan), None
        mine_cells, ref_cells = await gather_or_cancel(send(mine, plan), send(ref, ref_plan))
        return mine_cells, ref_cells

    async def _freeze(
        self, ctx: ProbeContext, saved: Mapping[str, Any], fit_pts: Sequence[usage.UsagePoint], sizes: list[int],
        cells: Sequence[needle.NeedleCell], loop_cells: Sequence[loops.LoopCell],
    ) -> None:
        """Write the baselines this endpoint lacks, from a clean run (never replaced here)."""
        fresh: dict[str, dict[str, Any]] = {
            "usage": {"counts": {p.label: p.reported for p in fit_pts if p.reported is not None}},
            "needle": {"sizes": sizes, "found": {c.key: c.found for c in cells if c.found is not None}},
            "loops": {"cells": {c.key: [c.loops, c.n] for c in loop_cells}},
        }
        for key, data in fresh.items():
            if saved[key] is None:
                await ctx.baselines.put(ctx.endpoint.id, self.name, key, data, at=ctx.clock())


async def _both(mine: Sampler, ref: Sampler | None, job: Any) -> tuple[Any, Any]:
    """Run `job` against the endpoint and, at the same time, the reference (None without one)."""
    if ref is None:
        return await job(mine), None
    a, b = await gather_or_cancel(job(mine), job(ref))
    return a, b


def _decide(
    checks: Mapping[str, Outcome], mine: Sampler, *, confirm: bool = False
) -> tuple[Verdict, Effect, list[str], bool]:
    """(verdict, effect, findings, truncation found) from the checks' findings. A needle cut whose
    pattern forgave a lost cell as noise is a hard rule only in a confirmatory round (its re-run):
    before, it raises SUSPECT, so borderline cells that flipped beside a chance cut never demote
    an endpoint ungated on one run."""
    findings = [f"{name}:{o.details.get('finding')}" for name, o in checks.items()
                if o.details.get("finding") in SUSPECT_FINDINGS[name]]
    needle_d, usage_d = checks["needle"].details, checks["usage"].details
    cut_from = usage_d.get("first_cut_local")
    lost_sizes = [int(k.split("@")[0]) for k in needle_d.get("lost", [])]
    flattened = usage_d.get("finding") == "flattened" and cut_from is not None and any(s >= cut_from for s in lost_sizes)
    truncation = needle_d.get("finding") == "truncation" or flattened
    if mine.requests and mine.errors == mine.requests:
        return "error", "suspect", findings, False
    if truncation:
        forgiven = bool(needle_d.get("noise")) and not flattened
        return "fail", "suspect" if forgiven and not confirm else "demote", findings, True
    if findings:
        return "fail", "suspect", findings, False
    judged = [o.details.get("finding") for o in checks.values()]
    if all(f in {"no_usage", "too_few", "no_pairs", "uninformative"} for f in judged):
        return "inconclusive", "suspect", findings, False
    return "pass", "suspect", findings, False
