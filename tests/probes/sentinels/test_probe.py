import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from gateway.routing.tokens import TokenCounter
from probes.base import Outcome, ProbeContext
from probes.baselines import MemoryBaselines
from probes.sentinels.probe import SentinelsProbe, _decide
from probes.sentinels.settings import LoopSettings, SentinelSettings
from probes.settings import ProbeSettings
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock
from tests.probes.fakes import FakeProbeClient, unavailable
from tests.probes.sentinels.fake_lm import FakeLM

WINDOW = 2048


@pytest.fixture(scope="module")
def counter():
    return TokenCounter()


def endpoint(name, weights=None):
    ep = make_endpoint(f"{name}/m", weights=weights)
    return dataclasses.replace(ep, deployment=ep.deployment.model_copy(update={"context_window": WINDOW}))


def context(model, reference=None, baselines=None, seed=0, weights=None, template=None):
    ep = endpoint("p", weights)
    return ProbeContext(
        endpoint=ep,
        client=FakeProbeClient(ep, model),
        settings=ProbeSettings(),
        baselines=baselines or MemoryBaselines(),
        rng=np.random.default_rng(seed),
        clock=FakeClock(),
        reference=FakeProbeClient(endpoint("ref", weights), reference) if reference else None,
        template=template,
    )


def probe(counter, **loops):
    return SentinelsProbe(SentinelSettings(loops=LoopSettings(**loops)) if loops else None, counter=counter)


async def test_an_honest_endpoint_passes_against_the_reference_and_freezes_its_baseline(counter):
    baselines = MemoryBaselines()
    ctx = context(FakeLM(counter=counter), FakeLM(counter=counter), baselines)
    result = await probe(counter).run(ctx)
    assert result.verdict == "pass", result.details["findings"]
    assert result.details["usage"]["finding"] == "linear"
    assert result.details["usage"]["comparison"]["finding"] == "match"
    assert result.details["needle"]["finding"] == "retrieved"
    assert result.details["loops"]["finding"] == "clean"
    assert result.requests == ctx.client.requests and result.tokens_spent == ctx.client.tokens
    sizes = result.details["needle"]["sizes"]
    assert sizes[0] == 128 and 1.2 * sizes[-1] < WINDOW
    assert await baselines.get("p/m", "sentinels", "needle") is not None
    assert (await baselines.get("p/m", "sentinels", "loops"))["cells"]["p0@t0"] == [0, 25]


@pytest.mark.parametrize("keep", ["head", "tail"])
@pytest.mark.parametrize("report", ["processed", "original"])
async def test_a_truncating_endpoint_is_demoted_on_the_first_run(counter, keep, report):
    lm = FakeLM(counter=counter, truncate={"tokens": 600, "keep": keep, "report": report})
    result = await probe(counter).run(context(lm, FakeLM(counter=counter)))
    assert (result.verdict, result.effect) == ("fail", "demote")
    assert result.details["truncation"] is True
    assert result.details["needle"]["finding"] == "truncation"
    assert result.details["needle"]["last_kept_size"] * 1.2 < 600
    if report == "processed":
        assert result.details["usage"]["finding"] == "flattened"
        assert result.details["usage"]["cut_reported"] == 600
    else:
        assert result.details["usage"]["finding"] == "linear"


@pytest.mark.parametrize("keep", ["head", "tail"])
async def test_a_silent_cut_to_half_the_window_is_demoted_on_the_first_run(counter, keep):
    # Keeping the last half loses only needles in the prompt's first part, and only in prompts
    # longer than half the window: the grid must hold several such cells.
    lm = FakeLM(counter=counter, truncate={"tokens": WINDOW // 2, "keep": keep, "report": "original"})
    result = await probe(counter).run(context(lm, FakeLM(counter=counter)))
    assert (result.verdict, result.effect) == ("fail", "demote"), result.details["needle"]
    assert result.details["needle"]["finding"] == "truncation"
    assert all(1.2 * int(key.split("@")[0]) > WINDOW // 2 for key in result.details["needle"]["lost"])


async def test_truncation_is_found_against_the_frozen_baseline_without_a_reference(counter):
    baselines = MemoryBaselines()
    first = await probe(counter).run(context(FakeLM(counter=counter), baselines=baselines))
    assert first.verdict == "pass" and first.details["judged_against"] == "self"
    lm = FakeLM(counter=counter, truncate={"tokens": 600, "keep": "tail", "report": "original"})
    second = await probe(counter).run(context(lm, baselines=baselines))
    assert second.details["judged_against"] == "baseline"
    assert (second.verdict, second.effect) == ("fail", "demote")


async def test_loops_at_five_percent_make_the_endpoint_suspect(counter):
    lm = FakeLM(counter=counter, loop_rate=0.05, seed=11)
    result = await probe(counter).run(context(lm, FakeLM(counter=counter)))
    assert (result.verdict, result.effect) == ("fail", "suspect")
    assert result.details["loops"]["finding"] == "loops"
    assert result.details["findings"] == ["loops:loops"]
    assert result.details["loops"]["seeds"] == [1000, 1024]


async def test_counts_off_the_reference_make_the_endpoint_suspect(counter):
    lm = FakeLM(counter=counter, overhead=12)
    result = await probe(counter).run(context(lm, FakeLM(counter=counter)))
    assert (result.verdict, result.effect) == ("fail", "suspect")
    assert result.details["findings"] == ["usage_comparison:mismatch"]
    # Unequal to the reference's counts alone: another template can do that, so it never demotes alone.
    assert result.grounds == "reference"


async def test_counts_off_a_same_weights_reference_that_renders_alike_are_the_endpoint_s_own(counter):
    """One weights file, one tokenizer; the audit-start check saw the same rendering of the same
    messages: other counts of the sentinel's prompts are the endpoint's usage reporting (billing)."""
    lm = FakeLM(counter=counter, overhead=12)
    result = await probe(counter).run(context(lm, FakeLM(counter=counter), weights="Q4_1", template="same"))
    assert result.details["findings"] == ["usage_comparison:mismatch"] and result.grounds == "self"
    for weights, template in (("Q4_1", None), (None, "same")):
        other = await probe(counter).run(context(lm, FakeLM(counter=counter), weights=weights, template=template))
        assert other.verdict == "fail" and other.grounds == "reference"


async def test_no_usage_still_runs_the_needle_and_loop_checks(counter):
    lm = FakeLM(counter=counter, usage=False, truncate={"tokens": 600, "keep": "head", "report": "original"})
    result = await probe(counter, repeats=2, samples=0).run(context(lm, FakeLM(counter=counter, usage=False)))
    assert result.details["usage"]["finding"] == "no_usage"
    assert (result.verdict, result.effect) == ("fail", "demote")


async def test_an_unreachable_endpoint_is_an_error_with_every_request_counted(counter):
    ctx = context(unavailable)
    result = await probe(counter, repeats=1, samples=0).run(ctx)
    assert result.verdict == "error"
    assert result.errors == result.requests == ctx.client.requests > 0


def _checks(needle_details, usage_finding="linear"):
    return {
        "needle": Outcome(0.2, details={"finding": "truncation", "lost": ["4000@0.5", "4000@0.95"], **needle_details}),
        "usage": Outcome(0.0, details={"finding": usage_finding, "first_cut_local": 3000}),
        "usage_comparison": Outcome(0.0, details={"finding": "match"}),
        "loops": Outcome(0.0, p_value=1.0, details={"finding": "clean"}),
    }


def test_a_cut_pattern_that_forgave_noise_demotes_only_when_its_re_run_finds_it_again():
    """Review finding: the noise tolerance turned {2000@0.05 lost, found at 4000} beside two lost
    cells at the largest size from 'degraded' (SUSPECT) into an ungated hard-rule demotion on one run."""
    mine = SimpleNamespace(requests=30, errors=0)
    noisy = _checks({"cut": ["4000@0.5", "4000@0.95"], "noise": ["2000@0.05"]})
    assert _decide(noisy, mine)[:2] == ("fail", "suspect")
    assert _decide(noisy, mine, confirm=True)[:2] == ("fail", "demote")
    clean = _checks({"cut": ["4000@0.5", "4000@0.95"], "noise": []})
    assert _decide(clean, mine)[:2] == ("fail", "demote")
    # Usage that flattened where retrieval was lost confirms the cut on its own.
    corroborated = _checks({"cut": ["4000@0.5", "4000@0.95"], "noise": ["2000@0.05"]}, usage_finding="flattened")
    assert _decide(corroborated, mine)[:2] == ("fail", "demote")
