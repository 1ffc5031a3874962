import json

import numpy as np
import pytest

from probes.base import Outcome, ProbeContext
from probes.baselines import MemoryBaselines
from probes.calibration import SCHEMA_VERSION
from probes.logprob_drift import LogprobDrift, calibrated, first_token, grounds, truncate
from probes.settings import DriftSettings, ProbeSettings
from probes.testbed.harness import EndpointSpec, Testbed
from tests.fakes.catalog import make_endpoint
from tests.probes.fakes import FakeProbeClient, ToyModel, chat_json, live_clients, unavailable

SETTINGS = ProbeSettings(drift=DriftSettings(requests=6, permutations=300))


def _ctx(model, *, reference=None, baselines=None, cap=20, confirm=False, seed=0, progress=None, settings=SETTINGS):
    endpoint = make_endpoint("prov/m", capabilities={"max_top_logprobs": cap})
    ref = None
    if reference is not None:
        ref = FakeProbeClient(make_endpoint("local/m"), reference)
    return ProbeContext(
        endpoint=endpoint,
        client=FakeProbeClient(endpoint, model),
        settings=settings,
        baselines=baselines or MemoryBaselines(),
        rng=np.random.default_rng(seed),
        clock=lambda: 1_000.0,
        reference=ref,
        progress=progress or (lambda done, total: None),
        confirm=confirm,
    )


def test_not_applicable_without_logprobs():
    probe = LogprobDrift()
    assert "logprobs" in probe.applicable(make_endpoint("a/m", capabilities={"logprobs": False}))
    assert "logprobs" in probe.applicable(make_endpoint("a/m", capabilities={"max_top_logprobs": 0}))
    assert probe.applicable(make_endpoint("a/m")) is None


def test_first_token_reads_the_first_position():
    token, top = first_token(chat_json("a", top={"a": -0.1, "b": -2.5}))
    assert token == "a"
    assert top == {"a": -0.1, "b": -2.5}
    assert first_token({"choices": [{"message": {"content": "a"}}]}) == (None, {})


def test_first_token_keeps_finite_logprobs_and_at_most_twenty() -> None:
    """A hostile upstream: NaN and infinite logprobs (json.loads takes them) are left out, and
    thousands of entries are cut to the 20 largest (the fidelity test's cost grows with them:
    2,000 entries kept its test 4.8 s on the event loop)."""
    body = chat_json("a", top={"a": -0.1, "b": -2.5})
    entries = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    entries += [{"token": "nan", "logprob": float("nan")}, {"token": "inf", "logprob": float("inf")},
                {"token": "-inf", "logprob": float("-inf")}, {"token": "bool", "logprob": True}, "junk"]
    entries += [{"token": f"t{i}", "logprob": -3.0 - i / 1000} for i in range(2000)]
    token, top = first_token(json.loads(json.dumps(body)))
    assert token == "a"
    assert len(top) == 20 and top["a"] == -0.1 and top["b"] == -2.5 and "t17" in top and "t18" not in top
    assert not {"nan", "inf", "-inf", "bool"} & set(top)


async def test_first_run_freezes_the_golden_window():
    seen = []
    baselines = MemoryBaselines()
    ctx = _ctx(ToyModel(), baselines=baselines, cap=5, progress=lambda d, t: seen.append((d, t)))
    result = await LogprobDrift().run(ctx)
    assert result.verdict == "inconclusive"
    assert result.requests == 4 * 6
    assert seen[-1] == (24, 24)
    body = ctx.client.bodies[0]
    assert (body["temperature"], body["top_logprobs"]) == (0, 5)
    # max_tokens is jittered like a user's (only the first token is read); temperature never is.
    budgets = {b["max_tokens"] for b in ctx.client.bodies}
    assert len(budgets) > 1 and budgets <= set(range(1, SETTINGS.traffic.max_tokens_jitter + 2))
    assert {b["temperature"] for b in ctx.client.bodies} == {0}
    golden = await baselines.get("prov/m", "logprob_drift", "golden:k5")
    assert golden is not None and len(golden["window"]["x"]) == 6
    assert "frozen" in result.details["golden"]


async def test_honest_endpoint_passes_against_its_golden():
    baselines = MemoryBaselines()
    await LogprobDrift().run(_ctx(ToyModel(noise=0.02, seed=1), baselines=baselines))
    result = await LogprobDrift().run(_ctx(ToyModel(noise=0.02, seed=2), baselines=baselines, seed=1))
    assert result.verdict == "pass"
    assert result.p_value > 0.05
    assert result.e_value == 0.5
    assert set(result.details["comparisons"]["golden"]["prompts"]) == set(SETTINGS.drift.prompts)


async def test_changed_weights_fail_against_the_golden():
    baselines = MemoryBaselines()
    await LogprobDrift().run(_ctx(ToyModel(noise=0.02, seed=1), baselines=baselines))
    ctx = _ctx(ToyModel(shift=0.3, noise=0.02, seed=2), baselines=baselines)
    result = await LogprobDrift().run(ctx)
    assert result.verdict == "fail"
    assert result.e_value == 10.5
    assert result.statistic > 0.05
    assert result.tokens_spent == 24 * 10 + sum(b["max_tokens"] for b in ctx.client.bodies)
    json.dumps(result.details)  # stored as JSON


async def test_reference_comparison_on_the_first_run():
    honest = await LogprobDrift().run(_ctx(ToyModel(), reference=ToyModel()))
    assert honest.verdict == "pass"
    assert honest.details["comparisons"]["reference"]["statistic"] == pytest.approx(0.0, abs=1e-12)
    ctx = _ctx(ToyModel("other"), reference=ToyModel())
    swapped = await LogprobDrift().run(ctx)
    assert swapped.verdict == "fail"
    assert swapped.grounds == "reference"  # no golden window yet: the reference comparison alone
    assert swapped.details["reference_tokens"] == 24 * 10 + sum(b["max_tokens"] for b in ctx.reference.bodies)


async def _calibrated_settings(tmp_path, shifts=(0.05, 0.06, 0.07), fpr=0.25):
    """Settings whose calibration for model "m" is one honest pair per shift: a reference and a copy
    whose logits differ a little (another engine family's kernels), measured by the probe itself.
    Three pairs support a false-positive rate of 1/4 per comparison, so `calibration_fpr` is 0.25."""
    engines = {"reference": {"family": 0}}
    pairs = []
    for i, shift in enumerate(shifts, 1):
        measured = await LogprobDrift().run(_ctx(ToyModel(shift=shift), reference=ToyModel()))
        assert "no honest calibration for model 'm'" in measured.details["reference_calibration"]
        engines[f"e{i}"] = {"family": i}
        prompts = measured.details["comparisons"]["reference"]["prompts"]
        pairs.append({"a": "reference", "b": f"e{i}", "prompts": prompts})
    path = tmp_path / "m.json"
    drift = SETTINGS.drift
    settings = {"prompts": list(drift.prompts), "requests": drift.requests, "top_logprobs": 20}
    honest = {"n": len(pairs), "pairs": pairs}
    raw = {"schema": SCHEMA_VERSION, "models": ["m"], "engines": engines, "honest": honest, "settings": settings}
    path.write_text(json.dumps(raw))
    drift = drift.model_copy(update={"calibration": str(path), "calibration_fpr": fpr})
    return SETTINGS.model_copy(update={"drift": drift})


async def test_an_engine_as_far_as_honest_ones_passes_the_calibrated_reference(tmp_path):
    settings = await _calibrated_settings(tmp_path)
    honest = await LogprobDrift().run(_ctx(ToyModel(shift=0.04), reference=ToyModel(), settings=settings))
    assert honest.details["reference_calibration"] == "calibrated: m.json"
    reference = honest.details["comparisons"]["reference"]
    assert reference["equality_p_value"] <= 0.05  # the equality test alone would fail it
    assert reference["beyond_margin"] == []
    assert honest.verdict == "pass"
    # n = 3 independent pairs, one value each (their largest S): the bound is 1/(n + 1) per comparison.
    assert (reference["honest_n"], reference["false_positive_rate"]) == (3, pytest.approx(1 / 4))


async def test_a_calibration_of_too_few_engine_families_is_not_used(tmp_path):
    """One honest pair supports a false-positive rate of 1/2 at best: above calibration_fpr, so the
    equality test stays, and says why (the committed SmolLM2 file is such a calibration)."""
    settings = await _calibrated_settings(tmp_path, shifts=(0.05,), fpr=0.01)
    result = await LogprobDrift().run(_ctx(ToyModel(shift=0.04), reference=ToyModel(), settings=settings))
    note = result.details["reference_calibration"]
    assert note.startswith("too few honest engine families (n=1): equality test") and "0.5" in note
    reference = result.details["comparisons"]["reference"]
    assert "margin" not in reference and reference["p_value"] <= 0.05
    assert result.verdict == "fail" and result.grounds == "reference"  # the policy keeps it at SUSPECT
    equality = Outcome(statistic=0.1, p_value=0.004, details={"prompts": {}})
    judged, note = await calibrated(equality, "smollm2", DriftSettings(), 20)
    assert judged is equality and note.startswith("too few honest engine families (n=1): equality test")
    assert "smollm2.json" in note


async def test_an_engine_further_than_honest_ones_fails_the_calibrated_reference(tmp_path):
    settings = await _calibrated_settings(tmp_path)
    for faulty in (ToyModel(shift=1.0), ToyModel("other")):
        result = await LogprobDrift().run(_ctx(faulty, reference=ToyModel(), settings=settings))
        reference = result.details["comparisons"]["reference"]
        assert result.verdict == "fail", reference
        assert set(reference["beyond_margin"]) == set(SETTINGS.drift.prompts)
        assert reference["statistic"] > reference["margin"]
        assert result.grounds == "reference"


async def test_a_reference_with_a_smaller_top_k_is_compared_at_its_k():
    ctx = _ctx(ToyModel(), reference=ToyModel())
    ctx.reference.endpoint = make_endpoint("local/m", capabilities={"max_top_logprobs": 5})
    result = await LogprobDrift().run(ctx)
    assert result.verdict == "pass"
    assert {b["top_logprobs"] for b in ctx.reference.bodies} == {5}
    assert {b["top_logprobs"] for b in ctx.client.bodies} == {20}


def test_truncate_keeps_the_most_likely():
    assert truncate({"x": [{"a": -3.0, "b": -0.5, "c": -1.0}]}, 2) == {"x": [{"b": -0.5, "c": -1.0}]}


async def test_a_window_with_too_few_answers_is_not_frozen():
    model = ToyModel()
    calls = {"n": 0}

    def first_prompt_fails(body):
        calls["n"] += 1
        return unavailable(body) if calls["n"] <= 5 else model(body)

    baselines = MemoryBaselines()
    result = await LogprobDrift().run(_ctx(first_prompt_fails, baselines=baselines))
    assert result.verdict == "inconclusive"
    assert "not frozen" in result.details["golden"]
    assert await baselines.get("prov/m", "logprob_drift", "golden:k20") is None


async def test_confirm_uses_the_confirm_alpha():
    result = await LogprobDrift().run(_ctx(ToyModel(), reference=ToyModel(), confirm=True))
    assert result.details["alpha"] == SETTINGS.health.confirm_alpha


async def test_unavailable_endpoint_is_an_error_not_a_verdict():
    result = await LogprobDrift().run(_ctx(unavailable))
    assert result.verdict == "error"
    assert result.errors == 24
    assert result.details["error"] == "every request failed"


async def test_answers_without_logprobs_are_an_error():
    result = await LogprobDrift().run(_ctx(lambda body: chat_json("a")))
    assert result.verdict == "error"
    assert result.errors == 0
    assert result.details["error"] == "no answer carried logprobs"


@pytest.mark.parametrize("failures", [3])
async def test_some_failures_are_counted_but_the_test_runs(failures):
    model = ToyModel()
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        return unavailable(body) if calls["n"] <= failures else model(body)

    result = await LogprobDrift().run(_ctx(flaky, reference=ToyModel()))
    assert result.errors == failures
    assert result.verdict == "pass"
    assert result.samples == 24 - failures


# -- the real model, through the testbed ---------------------------------------------------------
# Requests are at T=0, so the answers are deterministic; the permutation tests use rng seed 0.

# 6 requests a prompt: a window that differs in every answer gets p about 0.003 per prompt.
LIVE = ProbeSettings(drift=DriftSettings(prompts=("x", "the 7"), requests=6, permutations=1000))


@pytest.fixture(scope="module")
def testbed():
    with Testbed([EndpointSpec("target", model="smollm2"), EndpointSpec("ref", model="smollm2", process=1)], threads=1) as tb:
        yield tb


async def test_live_drift_passes_honest_and_fails_requantized_and_substituted(testbed):
    testbed.clear_fault("target")
    baselines = MemoryBaselines()
    urls = {name: testbed.base_url(name) for name in ("target", "ref")}
    try:
        async with live_clients(urls) as clients:

            async def run(reference=True):
                ctx = ProbeContext(
                    endpoint=clients["target"].endpoint, client=clients["target"], settings=LIVE, baselines=baselines,
                    rng=np.random.default_rng(0), clock=lambda: 1_000.0, reference=clients["ref"] if reference else None,
                )
                return await LogprobDrift().run(ctx)

            first = await run()  # freezes the golden window; the reference is another process
            assert first.verdict == "pass", first.details
            assert set(first.details["comparisons"]) == {"reference"}
            honest = await run(reference=False)
            assert honest.verdict == "pass", honest.details
            assert set(honest.details["comparisons"]) == {"golden"}

            testbed.set_fault("target", {"quantize": "Q2_K"})
            quantized = await run(reference=False)
            assert quantized.verdict == "fail", quantized.details
            assert set(quantized.details["comparisons"]) == {"golden"}
            assert quantized.p_value <= 0.01

            testbed.set_fault("target", {"substitute": "gemma3-270m"})
            swapped = await run()
            assert swapped.verdict == "fail", swapped.details
            assert swapped.details["comparisons"]["reference"]["p_value"] <= 0.01
    finally:
        testbed.clear_fault("target")


def test_a_failure_rests_on_the_reference_alone_unless_the_golden_window_rejects_too() -> None:
    golden_ok, golden_bad = Outcome(0.1, p_value=0.4), Outcome(0.9, p_value=0.001)
    ref_bad = Outcome(0.7, p_value=5e-05)
    assert grounds("fail", {"golden": golden_ok, "reference": ref_bad}, 0.05) == "reference"
    assert grounds("fail", {"reference": ref_bad}, 0.05) == "reference"  # no golden window yet
    assert grounds("fail", {"golden": golden_bad, "reference": ref_bad}, 0.05) == "self"
    # The golden test counts at its Bonferroni share: 2 x 0.03 > 0.05.
    assert grounds("fail", {"golden": Outcome(0.5, p_value=0.03), "reference": ref_bad}, 0.05) == "reference"
    assert grounds("fail", {"golden": golden_bad}, 0.05) == "self"
    assert grounds("pass", {"golden": golden_ok, "reference": Outcome(0.1, p_value=0.5)}, 0.05) == "self"


async def test_a_window_of_fresh_evaluations_is_frozen_apart_from_cached_ones():
    """A llama-server reference or engine asked with `cache_prompt: false` answers another series
    than its cached answers, from which its golden window may have been frozen before: kept apart."""
    baselines = MemoryBaselines()
    await LogprobDrift().run(_ctx(ToyModel(), baselines=baselines, cap=5))
    ctx = _ctx(ToyModel(), baselines=baselines, cap=5)
    ctx.client.fresh = True
    result = await LogprobDrift().run(ctx)
    assert result.verdict == "inconclusive" and "frozen" in result.details["golden"]  # its own first window
    assert await baselines.get("prov/m", "logprob_drift", "golden:k5:uncached") is not None
