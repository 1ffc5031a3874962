"""Distribution test (MET): sampled completions of fixed prompts compared with the reference
engine's by MMD with a Hamming kernel, permutations stratified by prompt.

The reference pool is drawn once per (reference endpoint, settings, the reference's prompt_tokens
for the first prompt: one request a run) and frozen in the baseline store, so a reference whose
template changed since gets a new pool instead of one rendered the old way. Without a reference,
the endpoint's first pool is frozen and later runs compare against it.

Seeds: every request of a pool has its own seed (the reference's 0..N-1). One seed per sample index
shared by all prompts couples the prompts' samples on any engine that turns a seed into the same
random draws whatever the prompt (llama.cpp's sampler does); the test permutes within each prompt
independently, so it then under-estimates its null's spread and rejects honest engines far above
alpha. The endpoint's seeds are fresh in every run (from the run's generator), so a confirmatory
round draws new answers instead of replaying the audit's; it still compares them with the same
frozen pool, so its p-value is not independent of the audit's (given one frozen pool, the rate at
which honest pools fail varies with that pool around alpha).

Samplers: an honest provider may cut the tail before sampling (llama-server does, top-k 40 and
min-p 0.05, unless the request turns it off), and a third-party provider's sampler is not the
gateway's to set. Against a reference, the endpoint's pool is compared with one reference pool per
tolerated sampler (`REFERENCE_SAMPLERS`: the plain sampler the request asks for, and llama.cpp's
default cut), and its p-value is the largest: valid for the union of those nulls, as fidelity's
test is for its tolerated truncations. Other cuts (a provider's own top-p, say) are not covered.

Whose grounds a failure rests on: at T=1 over sampled texts, honest engines of the same weights
differed only by numerics the test did not see at its sizes in what was measured (bench/
distribution_null.py: 8 honest pools against one reference draw per sampler; the honest rounds of
bench/blind_drill.py), so where the endpoint and the reference declare the same weights
(`DeploymentConfig.weights`) and their templates agree, a failure in a confirmatory round is the
endpoint's own evidence, which can confirm a drift alarm against the reference (a scheduled window
compares with the same frozen pool every time, so its failures stay reference disagreements).
Templates agree when the audit-start check (probes.template_check) saw equal counts; without that
check, when every pool reported equal prompt tokens for every prompt.
Otherwise (weights unknown or different: a bf16 provider against a Q4_1 reference differs for real)
it is a reference disagreement (probes.policy).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from probes.base import Effect, Grounds, Outcome, ProbeContext, ProbeResult
from probes.budget import BudgetExhausted
from probes.client import ProbeRejected, ProbeUnavailable
from probes.prompt_identity import reported_prompt_tokens
from probes.stats.mmd import mmd_test
from probes.template_check import same_weights
from probes.windowed import Meter, judged, result

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.client import ProbeClient
    from probes.settings import DistributionSettings

# Pinned: changing a prompt changes the pool's key, so old frozen pools are not compared with it.
PROMPTS: tuple[str, ...] = (
    "Continue the story: The lighthouse keeper opened the door and",
    "Write one sentence about the history of the bicycle.",
    "Describe the water cycle in two sentences.",
    "Continue: Once upon a time, in a village by the sea,",
    "What is the capital of Australia, and why was it chosen?",
    "Explain what a prime number is.",
    "Continue the story: The train stopped in the middle of the desert.",
    "Name three planets and one fact about each.",
    "Write the opening line of a mystery novel.",
    "How do bees make honey?",
    "Continue: The old map showed a river that no longer existed.",
    "Explain why the sky is blue.",
    "Describe a busy market in the morning.",
    "What did the Romans build roads for?",
    "Continue the story: She found a letter hidden inside the piano.",
    "Give a short definition of photosynthesis.",
    "Write a sentence that starts with 'In the winter of 1902'.",
    "Why do cats purr?",
    "Continue: The robot looked at its hands for the first time.",
    "Describe the taste of a lemon to someone who has never had one.",
    "What is the tallest mountain in Africa?",
    "Continue the story: At midnight the library lights turned on by themselves.",
    "Explain how a compass works.",
    "Write one sentence about the invention of paper.",
    "Continue: The last bus of the night was nearly empty, except for",
)

Pool = dict[str, Any]  # {"texts": [...], "prompts": [index...], "prompt_tokens": {index: n}}


# The seed layout (module docstring): pools frozen under another layout are not compared with these.
SEED_LAYOUT = "per-request"

# The samplers an honest provider may put the endpoint's requests through (module docstring): each
# gets a reference pool drawn through it. The plain one first (its pool key is the one without a sampler).
REFERENCE_SAMPLERS: tuple[Mapping[str, float], ...] = ({}, {"top_k": 40, "min_p": 0.05})


def pool_key(
    settings: DistributionSettings, prompts: tuple[str, ...], sampler: Mapping[str, float] | None = None,
    rendering: int | None = None,
) -> str:
    """The frozen pool's key: its settings, and (`rendering`) the reference's count of the first
    prompt when it was drawn, so a reference whose template changed since gets a new pool."""
    spec: list[Any] = [prompts, settings.samples_per_prompt, settings.temperature, settings.max_tokens, SEED_LAYOUT]
    if sampler:
        spec.append(sorted(sampler.items()))
    spec.append({"rendering": rendering})  # None too: pools from before it was keyed are not reused
    return "pool:" + hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


async def rendering(reference: ProbeClient, prompt: str) -> int | None:
    """The reference's prompt_tokens for `prompt` now (one token of answer); None without a count."""
    try:
        answer = await reference.chat({"messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
                                       "temperature": 0})
    except (ProbeUnavailable, BudgetExhausted):
        return None
    return reported_prompt_tokens(answer)


async def draw_pool(
    client: ProbeClient, prompts: tuple[str, ...], settings: DistributionSettings, step: Callable[[], None],
    *, first_seed: int = 0, sampler: Mapping[str, float] | None = None, stop_on_refusal: bool = False,
) -> tuple[Pool, int]:
    """`samples_per_prompt` completions of each prompt, sample j of prompt i with its own seed
    `first_seed + i * samples_per_prompt + j`, with the `sampler`'s settings added to each request.
    With `stop_on_refusal` (the caller knows the upstream answers the first prompt without the
    sampler), a 4xx to the very first request ends the draw: the upstream refuses the sampler, and
    every other request carries it too. The pool then says why (`refused`)."""
    texts: list[str] = []
    indices: list[int] = []
    prompt_tokens: dict[str, int] = {}
    errors = 0
    for i, prompt in enumerate(prompts):
        for j in range(settings.samples_per_prompt):
            body = {
                "messages": [{"role": "user", "content": prompt}],
                "temperature": settings.temperature,
                "top_p": 1,
                "max_tokens": settings.max_tokens,
                "seed": first_seed + i * settings.samples_per_prompt + j,
                **(sampler or {}),
            }
            try:
                response = await client.chat(body)
            except ProbeRejected as exc:
                errors += 1
                if sampler and stop_on_refusal and i == j == 0:
                    step()
                    return {"texts": [], "prompts": [], "prompt_tokens": {}, "refused": str(exc)}, errors
            except ProbeUnavailable:
                errors += 1
            else:
                texts.append(_content(response))
                indices.append(i)
                tokens = (response.get("usage") or {}).get("prompt_tokens")
                if isinstance(tokens, int):
                    prompt_tokens[str(i)] = tokens
            step()
    return {"texts": texts, "prompts": indices, "prompt_tokens": prompt_tokens}, errors


def _content(response: Mapping[str, Any]) -> str:
    try:
        content = response["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    return content if isinstance(content, str) else ""


def template_mismatches(sample: Pool, reference: Pool) -> list[int]:
    """Prompts whose reported prompt tokens differ: a different chat template makes MMD meaningless."""
    a, b = sample["prompt_tokens"], reference["prompt_tokens"]
    return sorted(int(i) for i in a.keys() & b.keys() if a[i] != b[i])


def confirm_permutations(configured: int, alpha: float, confirm: bool) -> int:
    """In a confirmatory round, enough permutations that the p-value floor 1/(B+1) sits 200 times
    below alpha: a fault at the floor must be able to confirm, and its e-value (probes.fleet: 1,342
    with the default calibrator, 224 at kappa 0.5, at alpha 0.001) to pass the fleet's e-BH gate (20
    times below gave 71 at kappa 0.5, under the bar of a fleet of eight at FDR 0.1)."""
    return max(configured, min(MAX_PERMUTATIONS, math.ceil(200 / alpha))) if confirm else configured


# A bound on a confirmatory round's permutations per pool whatever confirm_alpha is set to.
MAX_PERMUTATIONS = 1_000_000


def _counted_everywhere(sample: Pool, references: list[Mapping[str, Any]], prompts: int) -> bool:
    """Whether every pool reported prompt tokens for every prompt: missing usage is no proof that
    the templates agree."""
    return all(len(p["prompt_tokens"]) == prompts for p in [sample, *references])


def _union_outcome(outcomes: list[Outcome]) -> int:
    """Which comparison judges the union of the samplers' nulls: one without a p-value (too few
    answers of a prompt) leaves the union untested, else the largest p-value."""
    return min(range(len(outcomes)), key=lambda i: (outcomes[i].p_value is not None, -(outcomes[i].p_value or 0.0)))


class Distribution:
    name: ClassVar[str] = "distribution"
    effect: ClassVar[Effect] = "confirm"

    def applicable(self, endpoint: Endpoint) -> str | None:
        if "chat" not in endpoint.deployment.capabilities.modes:
            return "the deployment does not serve chat completions"
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        settings = ctx.settings.distribution
        prompts = PROMPTS[: settings.prompts]
        alpha = ctx.settings.health.confirm_alpha if ctx.confirm else settings.alpha
        per_side = len(prompts) * settings.samples_per_prompt
        # Against a reference: one frozen reference pool per tolerated sampler; without: the
        # endpoint's own first pool.
        samplers = REFERENCE_SAMPLERS if ctx.reference is not None else ({},)
        owner = ctx.reference.endpoint_id if ctx.reference is not None else ctx.endpoint.id
        rendered = await rendering(ctx.reference, prompts[0]) if ctx.reference is not None else None
        keys = [pool_key(settings, prompts, s, rendered) for s in samplers]
        pools: list[Mapping[str, Any] | None] = [await ctx.baselines.get(owner, self.name, k) for k in keys]
        missing = sum(p is None for p in pools) if ctx.reference is not None else 0
        meter = Meter(ctx, per_side * (1 + missing))
        # Fresh seeds, none of them the reference pool's (0..per_side-1).
        first_seed = int(ctx.rng.integers(per_side, 2**31 - per_side))
        sample, errors = await draw_pool(ctx.client, prompts, settings, meter.step, first_seed=first_seed)
        spent = meter.spent(errors)
        if len(sample["texts"]) < 2:
            return result(self, "error", Outcome(statistic=0.0), spent, alpha, error="too few completions")

        comparison = "reference" if ctx.reference is not None else "self"
        frozen_now = missing > 0
        if ctx.reference is None and pools[0] is None:
            await ctx.baselines.put(ctx.endpoint.id, self.name, keys[0], sample, at=ctx.clock())
            return result(
                self, "inconclusive", Outcome(statistic=0.0, samples=len(sample["texts"])), spent, alpha,
                comparison=comparison, pool="no reference engine: this endpoint's pool is frozen now",
            )
        refused: list[dict[str, Any]] = []
        if ctx.reference is not None:
            for i, (sampler, key) in enumerate(zip(samplers, keys, strict=True)):
                if pools[i] is None:
                    plain = pools[0]  # drawn first: does the reference answer the first prompt at all?
                    answers_first = plain is not None and 0 in plain["prompts"]
                    drawn, reference_errors = await draw_pool(ctx.reference, prompts, settings, meter.step,
                                                              sampler=sampler, stop_on_refusal=answers_first)
                    if "refused" in drawn:  # not frozen: a reference upgraded later gets its cut pool
                        refused.append({"sampler": dict(sampler), "reason": drawn["refused"]})
                        continue
                    if not reference_errors:  # only a complete pool is worth freezing
                        await ctx.baselines.put(owner, self.name, key, drawn, at=ctx.clock())
                    pools[i] = drawn
        # A tolerated sampler's pool the reference could not draw (an upstream that rejects `top_k`,
        # say) is left out; the union is then incomplete, and a failure no own evidence.
        usable = [(s, p) for s, p in zip(samplers, pools, strict=True) if p is not None and len(p["texts"]) >= 2]
        if not usable or usable[0][0] != samplers[0]:
            return result(self, "error", Outcome(statistic=0.0), spent, alpha, error="too few reference completions")
        complete = len(usable) == len(samplers)
        samplers = tuple(s for s, _ in usable)
        references = [p for _, p in usable]

        # Tens of thousands of permutations a pool in a confirmatory round: off the event loop.
        permutations = confirm_permutations(settings.permutations, alpha, ctx.confirm)
        outcomes = [
            await asyncio.to_thread(
                mmd_test, sample["texts"], sample["prompts"], p["texts"], p["prompts"],
                max_chars=settings.max_chars, permutations=permutations, rng=ctx.rng,
            )
            for p in references
        ]
        # The endpoint passes when its pool matches any tolerated sampler's.
        best = _union_outcome(outcomes)
        verdict, outcome = judged(outcomes[best], alpha, ctx.settings.health)
        reference_pool = references[best]
        mismatches = template_mismatches(sample, dict(references[0]))
        weights: bool | None = None
        grounds: Grounds = "self"
        if ctx.reference is not None:  # see the module docstring
            weights = same_weights(ctx.endpoint, ctx.reference.endpoint)
            # Rendered alike: the audit-start check saw the same counts for the same messages (one
            # weights file, one tokenizer: the pool's counts then add nothing but what an endpoint
            # could alter to keep its failure a disagreement); without it, the pool's own counts.
            # A pool keyed by no rendering (the reference's count was not had) may be one drawn
            # under another template than the reference's now: no own evidence from it.
            alike = rendered is not None and (ctx.template == "same" or (
                _counted_everywhere(sample, references, len(prompts)) and not mismatches))
            # Own grounds only as the confirmation it is meant for: in a confirmatory round (a
            # scheduled window compares with the same frozen pool again and again).
            grounds = "self" if ctx.confirm and complete and weights and alike else "reference"
        return result(
            self, verdict, outcome, spent, alpha, grounds=grounds,
            comparison=comparison, reference_frozen_now=frozen_now, same_weights=weights,
            samplers=[{"sampler": dict(s), "p_value": o.p_value, "statistic": round(o.statistic, 6)}
                      for s, o in zip(samplers, outcomes, strict=True)] if ctx.reference is not None else None,
            template_mismatches=mismatches, refused_samplers=refused or None, reference_rendering=rendered,
            mean_chars=round(sum(map(len, sample["texts"])) / len(sample["texts"]), 1),
            reference_mean_chars=round(sum(map(len, reference_pool["texts"])) / len(reference_pool["texts"]), 1),
        )
