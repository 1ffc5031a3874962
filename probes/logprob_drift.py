"""Logprob drift (LT): one-token answers at T=0 with top logprobs, a window of `requests` per
fixed prompt, tested against the endpoint's own frozen golden window and, when a reference engine
serves the model, against a fresh reference window (Bonferroni over both and over prompts).

Two correct engines differ at T=0 (kernels, batch split), so the reference comparison is judged
against the honest cross-engine margin of the model's calibration (probes.calibration,
probes.stats.equivalence) when there is one for these settings, measured on enough independent
engine families to support `calibration_fpr`; otherwise it stays the equality test, which honest
engines may fail, and `reference_calibration` in the details says so (a failure on the reference
alone has grounds "reference": the policy keeps it at SUSPECT).

The first run on an endpoint freezes its golden window; it is replaced only by a declared
rebaseline (clearing the endpoint's baselines), never because of an alarm.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from probes.base import Effect, Grounds, Outcome, ProbeContext, ProbeResult
from probes.calibration import find_calibration
from probes.client import ProbeUnavailable
from probes.stats.drift import drift_test
from probes.stats.equivalence import beyond_margin, conformal_margin
from probes.traffic import first_token_budget
from probes.windowed import Meter, judged, result

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.client import ProbeClient
    from probes.settings import DriftSettings, ProbeSettings

Window = dict[str, list[dict[str, float]]]


def logprobs_reason(endpoint: Endpoint) -> str | None:
    """Why an endpoint cannot answer a one-token chat request with top logprobs, or None."""
    caps = endpoint.deployment.capabilities
    if "chat" not in caps.modes:
        return "the deployment does not serve chat completions"
    if not caps.logprobs or caps.max_top_logprobs < 1:
        return "the deployment returns no top logprobs"
    return None


# The most top logprobs an answer may carry (the OpenAI API's cap); an upstream sending more gets
# its largest this many read, so a hostile list cannot make the statistics' work grow.
MAX_TOP_LOGPROBS = 20


def first_token(response: Mapping[str, Any]) -> tuple[str | None, dict[str, float]]:
    """(sampled token, {token: logprob} of its top logprobs) at the first position; ({}) if absent.
    Only finite logprobs count (NaN, +inf and -inf entries are left out), at most MAX_TOP_LOGPROBS."""
    try:
        entry = response["choices"][0]["logprobs"]["content"][0]
        items = entry.get("top_logprobs") or ()
        items = items[: 64 * MAX_TOP_LOGPROBS] if isinstance(items, list) else ()
    except (KeyError, IndexError, TypeError, AttributeError):
        return None, {}
    top: dict[str, float] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        token, lp = item.get("token"), item.get("logprob")
        if isinstance(token, str) and isinstance(lp, int | float) and not isinstance(lp, bool) and math.isfinite(lp):
            top[token] = max(float(lp), top.get(token, float("-inf")))
    if len(top) > MAX_TOP_LOGPROBS:
        top = dict(sorted(top.items(), key=lambda kv: kv[1], reverse=True)[:MAX_TOP_LOGPROBS])
    token = entry.get("token")
    return (token if isinstance(token, str) else None), top


async def sample_window(
    client: ProbeClient, prompts: Sequence[str], requests: int, top_logprobs: int, step: Callable[[], None],
    max_tokens: Callable[[], int] = lambda: 1,
) -> tuple[Window, int]:
    """`requests` T=0 answers per prompt, of which the first token's top logprobs are read:
    (prompt -> top logprobs per answer, errors). `max_tokens` (jittered, like a user's) does not
    change the first token's distribution."""
    window: Window = {}
    errors = 0
    for prompt in prompts:
        answers = window.setdefault(prompt, [])
        for _ in range(requests):
            body = {
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens(),
                "temperature": 0,
                "logprobs": True,
                "top_logprobs": top_logprobs,
            }
            try:
                _, top = first_token(await client.chat(body))
            except ProbeUnavailable:
                errors += 1
            else:
                if top:
                    answers.append(top)
            step()
    return window, errors


# A confirmatory re-run's smallest p-value (tests/(B+1) after Bonferroni) stays this many times
# below confirm_alpha, so that a fault at the permutation floor is confirmed, not lost to a tie.
CONFIRM_FLOOR_MARGIN = 20


def drift_permutations(settings: ProbeSettings, *, confirm: bool, tests: int) -> int:
    """Permutations per test: the configured count, raised in a confirmatory round when needed."""
    if not confirm:
        return settings.drift.permutations
    floor_needs = math.ceil(CONFIRM_FLOOR_MARGIN * max(1, tests) / settings.health.confirm_alpha)
    return max(settings.drift.permutations, floor_needs)


def truncate(window: Window, k: int) -> Window:
    """Each answer's k most likely tokens."""
    return {
        prompt: [dict(sorted(top.items(), key=lambda kv: -kv[1])[:k]) for top in answers]
        for prompt, answers in window.items()
    }


class LogprobDrift:
    name: ClassVar[str] = "logprob_drift"
    effect: ClassVar[Effect] = "evidence"

    def applicable(self, endpoint: Endpoint) -> str | None:
        return logprobs_reason(endpoint)

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        settings = ctx.settings.drift
        caps = ctx.endpoint.deployment.capabilities
        k = min(settings.top_logprobs, caps.max_top_logprobs)
        alpha = ctx.settings.health.confirm_alpha if ctx.confirm else settings.alpha
        sides = 2 if ctx.reference is not None else 1
        permutations = drift_permutations(ctx.settings, confirm=ctx.confirm, tests=len(settings.prompts) * sides)
        meter = Meter(ctx, len(settings.prompts) * settings.requests * sides)
        budget = partial(first_token_budget, ctx.rng, ctx.settings.traffic)
        window, errors = await sample_window(ctx.client, settings.prompts, settings.requests, k, meter.step, budget)
        spent = meter.spent(errors)
        answered = sum(len(v) for v in window.values())
        if answered == 0:
            reason = "every request failed" if errors == spent["requests"] else "no answer carried logprobs"
            return result(self, "error", Outcome(statistic=0.0), spent, alpha, error=reason, top_logprobs=k)

        comparisons: dict[str, Outcome] = {}
        details: dict[str, Any] = {"top_logprobs": k}
        # Windows frozen from a server's cached answers are another series than uncached ones.
        key = f"golden:k{k}" + (":uncached" if getattr(ctx.client, "fresh", False) else "")
        golden = await ctx.baselines.get(ctx.endpoint.id, self.name, key)
        # A golden window needs every prompt answered at least twice; otherwise the next run tries again.
        complete = all(len(window.get(p, ())) >= 2 for p in settings.prompts)
        if golden is None:
            if complete:
                frozen = {"window": window, "top_logprobs": k}
                await ctx.baselines.put(ctx.endpoint.id, self.name, key, frozen, at=ctx.clock())
        else:
            comparisons["golden"] = drift_test(
                window, golden["window"], permutations=permutations, rng=ctx.rng
            )
        reference_tokens = 0
        if ctx.reference is not None:
            # Both sides at the smaller top-k: imputation depends on how many tokens a response lists.
            k_ref = min(k, ctx.reference.endpoint.deployment.capabilities.max_top_logprobs)
            before = ctx.reference.tokens
            ref_window, _ = await sample_window(
                ctx.reference, settings.prompts, settings.requests, k_ref, meter.step, budget
            )
            reference_tokens = ctx.reference.tokens - before
            equality = drift_test(
                truncate(window, k_ref), truncate(ref_window, k_ref), permutations=permutations, rng=ctx.rng
            )
            comparisons["reference"], details["reference_calibration"] = await calibrated(
                equality, ctx.endpoint.model, settings, k_ref
            )

        verdict, outcome = judged(_combine(comparisons, answered), alpha, ctx.settings.health)
        details["reference_tokens"] = reference_tokens
        # The golden window's own test (None without one): valid whichever engine serves the model.
        details["self_p_value"] = comparisons["golden"].p_value if "golden" in comparisons else None
        if golden is None:
            details["golden"] = (
                "frozen now: later runs test against this window" if complete
                else "not frozen: too few answers; the next run tries again"
            )
        return result(self, verdict, outcome, spent, alpha, grounds=grounds(verdict, comparisons, alpha), **details)


async def calibrated(equality: Outcome, model: str, settings: DriftSettings, k: int) -> tuple[Outcome, str]:
    """The reference comparison against the honest cross-engine margin for `model`, and a note on
    which calibration judged it; without one for these settings, or with one of too few engine
    families to support `calibration_fpr` (its bound is 1/(n + 1) at best), the equality test as it is."""
    found = partial(find_calibration, model, settings.calibration, settings.prompts, k, settings.requests)
    calibration, note = await asyncio.to_thread(found)
    if calibration is None:
        return equality, note
    fpr = settings.calibration_fpr
    margin = conformal_margin(calibration.values_for(settings.prompts), fpr, calibration.source)
    if margin.bound > fpr:
        return equality, (
            f"too few honest engine families (n={margin.n}): equality test ({Path(calibration.source).name} "
            f"supports a false-positive rate of {margin.bound:.3g} per comparison, above calibration_fpr {fpr:g})"
        )
    return beyond_margin(equality, margin), note


def grounds(verdict: str, comparisons: Mapping[str, Outcome], alpha: float) -> Grounds:
    """"reference" when a failure rests on the reference comparison alone: the golden window
    (the endpoint's own past) did not reject at its Bonferroni share of alpha, or there is none."""
    if verdict != "fail":
        return "self"
    tested = [o for o in comparisons.values() if o.p_value is not None]
    golden = comparisons.get("golden")
    if golden is not None and golden.p_value is not None and len(tested) * golden.p_value <= alpha:
        return "self"
    return "reference" if "reference" in comparisons else "self"


def _combine(comparisons: Mapping[str, Outcome], answered: int) -> Outcome:
    """Bonferroni over the comparisons that produced a p-value; the golden statistic leads."""
    tested = {name: o for name, o in comparisons.items() if o.p_value is not None}
    # Each comparison's own details (a calibrated one adds its margin and false-positive rate).
    details = {
        name: {**o.details, "statistic": o.statistic, "p_value": o.p_value, "prompts": o.details.get("prompts", {})}
        for name, o in comparisons.items()
    }
    if not tested:
        return Outcome(statistic=0.0, samples=answered, details={"comparisons": details})
    p = min(1.0, len(tested) * min(float(o.p_value) for o in tested.values()))  # type: ignore[arg-type]
    lead = tested.get("golden") or next(iter(tested.values()))
    return Outcome(
        statistic=lead.statistic, p_value=p, samples=answered, reference_samples=lead.reference_samples,
        details={"comparisons": details},
    )
