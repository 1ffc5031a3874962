import json

import numpy as np
import pytest

from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.budget import BudgetExhausted
from probes.client import ProbeRejected
from probes.distribution import PROMPTS, REFERENCE_SAMPLERS, Distribution, confirm_permutations, pool_key
from probes.settings import DistributionSettings, ProbeSettings
from probes.template_check import same_weights
from probes.testbed.harness import EndpointSpec, Testbed
from tests.fakes.catalog import make_endpoint
from tests.probes.fakes import FakeProbeClient, ToyModel, chat_json, live_clients, unavailable

SETTINGS = ProbeSettings(distribution=DistributionSettings(prompts=5, samples_per_prompt=6, max_tokens=8, permutations=300))


def _ctx(model, *, reference=None, baselines=None, confirm=False, seed=0, settings=SETTINGS, weights=(None, None),
         template=None):
    endpoint = make_endpoint("prov/m", weights=weights[0])
    ref = FakeProbeClient(make_endpoint("local/m", weights=weights[1]), reference) if reference is not None else None
    return ProbeContext(
        endpoint=endpoint,
        client=FakeProbeClient(endpoint, model),
        settings=settings,
        baselines=baselines or MemoryBaselines(),
        rng=np.random.default_rng(seed),
        clock=lambda: 1_000.0,
        reference=ref,
        confirm=confirm,
        template=template,
    )


def test_prompts_are_pinned_and_enough_for_the_default():
    assert len(PROMPTS) == len(set(PROMPTS)) >= ProbeSettings().distribution.prompts


async def test_requests_use_the_settings_and_a_seed_each():
    """Each of the reference's pools (one per tolerated sampler) has seeds 0..29, one per request;
    the endpoint's are fresh in every run and none of the reference's, so a confirmatory round
    draws new answers. The endpoint is asked for the plain sampler only."""
    ctx = _ctx(ToyModel(), reference=ToyModel())
    await Distribution().run(ctx)
    bodies = ctx.client.bodies
    assert len(bodies) == 30
    assert {b["temperature"] for b in bodies} == {1.0}
    assert {b["max_tokens"] for b in bodies} == {8}
    assert not any("top_k" in b or "min_p" in b for b in bodies)
    assert bodies[6]["messages"][0]["content"] == PROMPTS[1]
    rendering, *reference = ctx.reference.bodies
    assert rendering["max_tokens"] == 1 and rendering["messages"][0]["content"] == PROMPTS[0]
    assert [b["seed"] for b in reference] == list(range(30)) * len(REFERENCE_SAMPLERS)
    assert [(b.get("top_k"), b.get("min_p")) for b in reference[::30]] == [(None, None), (40, 0.05)]
    seeds = [b["seed"] for b in bodies]
    assert len(set(seeds)) == 30 and min(seeds) >= 30
    again = _ctx(ToyModel(), reference=ToyModel(), seed=1)
    await Distribution().run(again)
    assert {b["seed"] for b in again.client.bodies}.isdisjoint(seeds)


class OffsetSeeds(ToyModel):
    """The same model on an engine of its own: it honours seeds, but maps them to other draws. Like
    ToyModel (and llama.cpp), one seed gives the same draws whatever the prompt."""

    def __init__(self, offset: int) -> None:
        super().__init__()
        self.offset = offset

    def __call__(self, body):
        return super().__call__({**body, "seed": body["seed"] + self.offset} if "seed" in body else body)


async def test_honest_engines_that_map_seeds_their_own_way_pass_at_about_alpha():
    """Sharing one seed across prompts coupled the prompts' samples, and the permutations (within each
    prompt, independently) under-estimated the null's spread: 31 of these 100 null runs failed at 0.05 (9 now)."""
    settings = ProbeSettings(distribution=DistributionSettings(prompts=25, samples_per_prompt=6, max_tokens=8,
                                                               permutations=200))
    trials, failed = 100, 0
    for k in range(trials):
        ctx = _ctx(OffsetSeeds(1_000_000 + k), reference=OffsetSeeds(5_000_000 + k), seed=k, settings=settings)
        result = await Distribution().run(ctx)
        failed += result.p_value <= 0.05
    # Binomial(100, 0.05): P(X > 12) = 0.0015; deterministic here (every generator is seeded).
    assert failed <= 12, failed


async def test_honest_endpoint_passes_and_the_reference_pool_is_drawn_once():
    baselines = MemoryBaselines()
    first = _ctx(ToyModel(seed=1), reference=ToyModel(seed=2), baselines=baselines)
    result = await Distribution().run(first)
    assert result.verdict == "pass"
    assert result.details["comparison"] == "reference"
    assert result.details["reference_frozen_now"] is True
    # One request for the reference's rendering of the first prompt, then a pool per sampler.
    assert first.reference.requests == 1 + 30 * len(REFERENCE_SAMPLERS)
    rendered = result.details["reference_rendering"]
    assert rendered == ToyModel()(first.reference.bodies[0])["usage"]["prompt_tokens"]
    for sampler in REFERENCE_SAMPLERS:
        assert await baselines.get("local/m", "distribution",
                                   pool_key(SETTINGS.distribution, PROMPTS[:5], sampler, rendered))
    second = _ctx(ToyModel(seed=3), reference=ToyModel(), baselines=baselines)
    again = await Distribution().run(second)
    assert second.reference.requests == 1
    assert again.verdict == "pass"
    assert again.details["reference_frozen_now"] is False


async def test_substituted_model_fails():
    result = await Distribution().run(_ctx(ToyModel("other"), reference=ToyModel()))
    assert result.verdict == "fail"
    assert result.p_value < 0.01
    assert result.e_value == 10.5
    assert result.grounds == "reference"  # a disagreement with the reference engine: alone it never demotes
    assert result.samples == 30 and result.reference_samples == 30
    assert len(result.details["per_prompt"]) == 5
    json.dumps(result.details)  # stored as JSON


async def test_without_reference_the_own_pool_is_frozen_then_compared():
    baselines = MemoryBaselines()
    first = await Distribution().run(_ctx(ToyModel(), baselines=baselines))
    assert first.verdict == "inconclusive"
    assert first.details["comparison"] == "self"
    # Other generators, so other seeds: fresh answers, not a replay of the frozen pool.
    same = await Distribution().run(_ctx(ToyModel(), baselines=baselines, seed=1))
    assert same.verdict == "pass"
    swapped = await Distribution().run(_ctx(ToyModel("other"), baselines=baselines, seed=2))
    assert swapped.verdict == "fail"
    assert swapped.details["comparison"] == "self" and swapped.grounds == "self"


async def test_template_mismatch_is_reported():
    model = ToyModel()

    def longer_prompt(body):
        out = model(body)
        out["usage"]["prompt_tokens"] += 7
        return out

    result = await Distribution().run(_ctx(longer_prompt, reference=model))
    assert result.details["template_mismatches"] == [0, 1, 2, 3, 4]


async def test_failures_give_an_error():
    result = await Distribution().run(_ctx(unavailable, reference=ToyModel()))
    assert result.verdict == "error"
    assert result.errors == 30


async def test_a_reference_pool_with_errors_is_used_but_not_frozen():
    model = ToyModel()
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        return unavailable(body) if calls["n"] == 2 else model(body)  # the plain pool's first request

    baselines = MemoryBaselines()
    result = await Distribution().run(_ctx(ToyModel(), reference=flaky, baselines=baselines))
    assert result.verdict == "pass"
    assert [s["p_value"] is not None for s in result.details["samplers"]] == [True, True]
    rendered = result.details["reference_rendering"]
    assert await baselines.get("local/m", "distribution", pool_key(SETTINGS.distribution, PROMPTS[:5], None, rendered)) is None
    # The other sampler's pool was complete: frozen.
    assert await baselines.get("local/m", "distribution",
                               pool_key(SETTINGS.distribution, PROMPTS[:5], REFERENCE_SAMPLERS[1], rendered))


async def test_empty_answers_are_compared_as_empty_text():
    result = await Distribution().run(_ctx(lambda body: chat_json(""), reference=ToyModel()))
    assert result.verdict == "fail"
    assert result.details["mean_chars"] == 0


# -- the real model, through the testbed ---------------------------------------------------------
# The reference's pool has seeds 0..N-1, the endpoint's fresh ones from rng seed 0 (which also draws
# the permutations).

# The first 30 characters carry the difference: measured on this pair of models, 4 completions per
# prompt caught the swap in 95% of resamples at 15-30 characters, 25% on whole 16-token answers.
LIVE = ProbeSettings(
    distribution=DistributionSettings(prompts=8, samples_per_prompt=5, max_tokens=8, max_chars=30, permutations=1000)
)


@pytest.fixture(scope="module")
def testbed():
    with Testbed([EndpointSpec("target", model="smollm2"), EndpointSpec("ref", model="smollm2", process=1)], threads=1) as tb:
        yield tb


async def test_live_distribution_passes_honest_and_fails_substituted(testbed):
    testbed.clear_fault("target")
    baselines = MemoryBaselines()
    urls = {name: testbed.base_url(name) for name in ("target", "ref")}
    try:
        async with live_clients(urls) as clients:

            async def run():
                ctx = ProbeContext(
                    endpoint=clients["target"].endpoint, client=clients["target"], settings=LIVE, baselines=baselines,
                    rng=np.random.default_rng(0), clock=lambda: 1_000.0, reference=clients["ref"],
                )
                return await Distribution().run(ctx)

            honest = await run()
            assert honest.verdict == "pass", honest.details
            assert honest.details["template_mismatches"] == []

            testbed.set_fault("target", {"substitute": "gemma3-270m"})
            swapped = await run()
            assert swapped.verdict == "fail", swapped.details
            assert swapped.p_value <= 0.01
            assert swapped.details["reference_frozen_now"] is False
    finally:
        testbed.clear_fault("target")


def test_a_confirmatory_round_raises_the_permutations_so_the_floor_sits_below_alpha() -> None:
    assert confirm_permutations(1000, 0.001, confirm=False) == 1000
    raised = confirm_permutations(1000, 0.001, confirm=True)
    assert 1 / (raised + 1) <= 0.001 / 200
    assert confirm_permutations(500_000, 0.001, confirm=True) == 500_000
    assert confirm_permutations(1000, 1e-9, confirm=True) == 1_000_000  # bounded whatever alpha is set to


def test_a_fault_at_the_confirmatory_floor_passes_a_fleet_of_eight() -> None:
    """The floor's e-value clears e-BH's first bar for 8 endpoints at FDR 0.1 (8 / 0.1 = 80) with room
    for the round's passing results (each costs at most a factor kappa = 0.5)."""
    from probes.stats.evalues import calibrate

    floor = 1 / (confirm_permutations(1000, 0.001, confirm=True) + 1)
    assert calibrate(floor, 0.5) * 0.5 >= 8 / 0.1


# -- samplers that cut the tail, and whose grounds a failure rests on -----------------------------
WIDER = ProbeSettings(distribution=DistributionSettings(prompts=10, samples_per_prompt=10, max_tokens=8, permutations=300))
LLAMA_CPP_DEFAULTS = {"top_k": 40, "min_p": 0.05}


class HeavyTail(ToyModel):
    """Per prompt, a few likely tokens and a long tail each under 5% of the top one, which together
    hold most of the mass: llama-server's default min-p cut (0.05) removes all of it."""

    def logprobs(self, prompt: str) -> np.ndarray:
        logits = np.full(len(self.tokens), np.log(0.04))
        head = np.random.default_rng([ord(c) for c in self.name + prompt]).choice(len(self.tokens), 3, replace=False)
        logits[head] = [0.0, -0.5, -1.0]
        return logits - np.log(np.exp(logits).sum())


async def test_an_honest_endpoint_whose_sampler_cuts_the_tail_as_llama_server_does_passes():
    """A provider's llama-server samples through its defaults (top-k 40, min-p 0.05): compared with a
    plain-sampling reference pool alone it fails, so the reference also draws a pool through that cut."""
    for seed in range(3):
        ctx = _ctx(HeavyTail(sampler=LLAMA_CPP_DEFAULTS), reference=HeavyTail(), settings=WIDER, seed=seed)
        result = await Distribution().run(ctx)
        plain, cut = result.details["samplers"]
        assert plain["p_value"] <= 0.01 < cut["p_value"], result.details["samplers"]
        assert result.verdict == "pass" and result.p_value == cut["p_value"]


async def test_a_fault_fails_against_every_tolerated_sampler():
    for endpoint in (HeavyTail("other", sampler=LLAMA_CPP_DEFAULTS), ToyModel(shift=1.5), ToyModel(served_temperature=0.5)):
        reference = HeavyTail() if isinstance(endpoint, HeavyTail) else ToyModel()
        result = await Distribution().run(_ctx(endpoint, reference=reference, settings=WIDER))
        assert result.verdict == "fail", (endpoint.name, result.details["samplers"])
        assert all(s["p_value"] <= 0.01 for s in result.details["samplers"])


@pytest.mark.parametrize(
    ("weights", "same"),
    [(("Q4_1", "q4_1"), True), (("Q4_1", "Q2_K"), False), (("bf16", None), False), ((None, None), False)],
)
def test_same_weights_needs_both_declared_and_equal(weights, same) -> None:
    assert same_weights(make_endpoint("a/m", weights=weights[0]), make_endpoint("b/m", weights=weights[1])) is same


async def test_against_a_reference_of_the_same_weights_a_failure_is_the_endpoint_s_own_evidence():
    """Honest engines of one set of weights pass at alpha, so a failure there is no engine gap."""
    result = await Distribution().run(_ctx(ToyModel("other"), reference=ToyModel(), weights=("q4_1", "Q4_1"),
                                           confirm=True))
    assert result.verdict == "fail" and result.grounds == "self"
    assert result.details["same_weights"] is True


async def test_a_scheduled_window_against_the_same_weights_stays_a_reference_disagreement():
    """Outside a confirmatory round the same frozen pool is met again and again (its honest failure
    rate varies with that pool around alpha): no own-grounds evidence from it."""
    result = await Distribution().run(_ctx(ToyModel("other"), reference=ToyModel(), weights=("Q4_1", "Q4_1")))
    assert result.verdict == "fail" and result.grounds == "reference"


async def test_missing_usage_is_no_proof_that_the_templates_agree():
    def no_usage(body):
        out = ToyModel("other")(body)
        out.pop("usage", None)
        return out

    result = await Distribution().run(_ctx(no_usage, reference=ToyModel(), weights=("Q4_1", "Q4_1"), confirm=True))
    assert result.verdict == "fail" and result.details["template_mismatches"] == []
    assert result.grounds == "reference"


async def test_a_comparison_without_a_p_value_leaves_the_union_untested():
    """The reference's plain pool keeps one answer per prompt (the others failed): that comparison
    has no p-value, so the cut pool alone must not judge an endpoint that samples plainly."""

    def plain_mostly_failing(body):
        if "top_k" not in body and body.get("seed", 0) % 10:  # one answer of each prompt's ten
            return unavailable(body)
        return HeavyTail()(body)

    result = await Distribution().run(_ctx(HeavyTail(), reference=plain_mostly_failing, settings=WIDER,
                                           weights=("Q4_1", "Q4_1"), confirm=True))
    assert [s["p_value"] is None for s in result.details["samplers"]] == [True, False]
    assert result.verdict == "inconclusive"


@pytest.mark.parametrize("weights", [(None, "Q4_1"), ("bf16", "Q4_1")])
async def test_unknown_or_other_weights_keep_a_failure_a_reference_disagreement(weights):
    result = await Distribution().run(_ctx(ToyModel("other"), reference=ToyModel(), weights=weights))
    assert result.verdict == "fail" and result.grounds == "reference"
    assert result.details["same_weights"] is False


async def test_a_template_mismatch_keeps_a_failure_a_reference_disagreement_whatever_the_weights():
    def other_template(body):
        out = ToyModel("other")(body)
        out["usage"]["prompt_tokens"] += 7
        return out

    result = await Distribution().run(_ctx(other_template, reference=ToyModel(), weights=("Q4_1", "Q4_1"),
                                           confirm=True))
    assert result.verdict == "fail" and result.details["template_mismatches"]
    assert result.grounds == "reference"


def _counts_one_prompt_otherwise(body):
    """A substitute that reports another count for one prompt (or none), to keep its failure a disagreement."""
    out = ToyModel("other")(body)
    if PROMPTS[0] in body["messages"][-1]["content"]:
        out["usage"]["prompt_tokens"] += 1
    if PROMPTS[1] in body["messages"][-1]["content"]:
        out.pop("usage")
    return out


async def test_counts_that_disagree_after_the_template_check_found_the_same_rendering_shield_nothing():
    """The audit-start check saw the endpoint render the reference's way, and one weights file has one
    tokenizer: other counts for some of the pool's prompts are the endpoint's usage, not its template."""
    result = await Distribution().run(_ctx(_counts_one_prompt_otherwise, reference=ToyModel(),
                                           weights=("Q4_1", "Q4_1"), confirm=True, template="same"))
    assert result.verdict == "fail" and result.grounds == "self"
    assert result.details["template_mismatches"] == [0]
    # Without the check (off, or it saw no counts) the pool's own counts are all there is.
    for template in (None, "unknown"):
        unchecked = await Distribution().run(_ctx(_counts_one_prompt_otherwise, reference=ToyModel(),
                                                  weights=("Q4_1", "Q4_1"), confirm=True, template=template))
        assert unchecked.verdict == "fail" and unchecked.grounds == "reference"


async def test_a_reference_that_rejects_the_tail_cut_is_compared_plainly_and_only_as_a_disagreement():
    """An upstream that refuses `top_k`/`min_p`: the cut pool is left out (the probe still runs), and
    without the whole union a failure is no own evidence."""

    def strict(body):
        return unavailable(body) if "top_k" in body else ToyModel()(body)

    honest = await Distribution().run(_ctx(ToyModel(seed=1), reference=strict, weights=("Q4_1", "Q4_1"), confirm=True))
    assert honest.verdict == "pass" and [s["sampler"] for s in honest.details["samplers"]] == [{}]
    swapped = await Distribution().run(_ctx(ToyModel("other"), reference=strict, weights=("Q4_1", "Q4_1"), confirm=True))
    assert swapped.verdict == "fail" and swapped.grounds == "reference"


async def test_a_sampler_the_reference_refuses_costs_one_request_a_run():
    """A 4xx for `top_k`/`min_p` is the upstream's answer to every request of that pool: the draw
    stops at the first one (it used to send the whole pool, every run, since nothing is frozen)."""

    def refuses_top_k(body):
        return ProbeRejected("top_k is not supported", status=400) if "top_k" in body else ToyModel()(body)

    baselines = MemoryBaselines()
    for run in range(2):
        ctx = _ctx(ToyModel(seed=1), reference=refuses_top_k, baselines=baselines, seed=run)
        result = await Distribution().run(ctx)
        cut = [b for b in ctx.reference.bodies if "top_k" in b]
        assert len(cut) == 1 and result.verdict == "pass"
        assert [s["sampler"] for s in result.details["samplers"]] == [{}]
        assert "top_k is not supported" in result.details["refused_samplers"][0]["reason"]


def _old_template(body):
    """The reference as it was: its template added a default system prompt (+24 tokens, other answers)."""
    out = ToyModel("old-template")(body)
    out["usage"]["prompt_tokens"] += 24
    return out


async def test_a_reference_whose_template_changed_gets_a_new_pool_not_the_old_rendering():
    """Pools frozen while the reference's template added a default system prompt (+24 tokens, and
    other answers); the reference renders otherwise now and the endpoint as it does: the old pool
    would fail this honest endpoint on its own grounds (the template check sees "same" today)."""

    baselines = MemoryBaselines()
    weights = ("Q4_1", "Q4_1")
    await Distribution().run(_ctx(ToyModel(), reference=_old_template, baselines=baselines, weights=weights))
    ctx = _ctx(ToyModel(seed=1), reference=ToyModel(), baselines=baselines, weights=weights, confirm=True,
               template="same")
    result = await Distribution().run(ctx)
    assert result.details["reference_frozen_now"] is True and result.verdict == "pass"
    assert ctx.reference.requests == 1 + 30 * len(REFERENCE_SAMPLERS)


async def test_a_prompt_the_reference_refuses_whatever_the_sampler_is_no_refused_sampler():
    """A 4xx for one prompt (a content filter) says nothing about `top_k`: the cut pool is drawn."""

    def filters_one_prompt(body):
        if PROMPTS[0] in body["messages"][-1]["content"] or PROMPTS[3] in body["messages"][-1]["content"]:
            return ProbeRejected("content_filter: flagged", status=400)
        return ToyModel()(body)

    result = await Distribution().run(_ctx(ToyModel(), reference=filters_one_prompt))
    assert result.details["refused_samplers"] is None
    assert [s["sampler"] for s in result.details["samplers"]] == [dict(s) for s in REFERENCE_SAMPLERS]


async def test_a_later_4xx_in_the_cut_pool_is_a_prompt_s_not_the_sampler_s():
    """The plain pool answered the first prompt and so did the cut pool: a 4xx for a later prompt
    (a content filter) is that prompt's error, and the cut pool is drawn on."""

    def filters_one_later_prompt(body):
        if PROMPTS[3] in body["messages"][-1]["content"]:
            return ProbeRejected("content_filter: flagged", status=400)
        return ToyModel()(body)

    ctx = _ctx(ToyModel(), reference=filters_one_later_prompt)
    result = await Distribution().run(ctx)
    assert result.details["refused_samplers"] is None and len(result.details["samplers"]) == 2
    assert sum("top_k" in b for b in ctx.reference.bodies) == 30


def _rendering_down(model, fail=unavailable):
    """`model`, but the request for the first prompt's rendering (one token, no seed) fails."""

    def respond(body):
        return fail(body) if "seed" not in body else model(body)

    return respond


async def test_without_the_reference_s_rendering_a_frozen_pool_may_be_stale_and_judges_nothing_own():
    """Pools frozen under "rendering unknown" while the reference rendered otherwise; its rendering
    request fails again today, so the pool met may be stale: a failure is a disagreement only."""

    baselines = MemoryBaselines()
    weights = ("Q4_1", "Q4_1")
    await Distribution().run(_ctx(ToyModel(), reference=_rendering_down(_old_template), baselines=baselines,
                                  weights=weights))
    ctx = _ctx(ToyModel(seed=1), reference=_rendering_down(ToyModel()), baselines=baselines, weights=weights,
               confirm=True, template="same")
    result = await Distribution().run(ctx)
    assert result.details["reference_rendering"] is None and result.grounds == "reference"
    swapped = await Distribution().run(_ctx(ToyModel("other"), reference=_rendering_down(ToyModel()),
                                            weights=weights, confirm=True, template="same"))
    assert swapped.verdict == "fail" and swapped.grounds == "reference"


async def test_a_spent_reference_budget_for_the_rendering_is_no_crash():
    def spent(body):
        return BudgetExhausted("reference budget spent")

    result = await Distribution().run(_ctx(ToyModel(), reference=_rendering_down(ToyModel(), spent)))
    assert result.verdict == "pass" and result.details["reference_rendering"] is None
