"""The sentinels against the testbed's real SmolLM2 (llama.cpp), judged against an honest
reference on the same weights. The reference is deterministic at T=0 (and seeded above it), so its
answers are memoized across runs, and every run draws its needle codes from the same seed: each
test pays only for its target's requests."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.sentinels.probe import SentinelsProbe
from probes.sentinels.settings import LoopSettings, NeedleSettings, SentinelSettings, UsageSettings
from probes.settings import ProbeSettings
from probes.testbed.harness import EndpointSpec, Testbed
from tests.fakes.clock import FakeClock
from tests.probes.fakes import live_clients

N_CTX = 512
# Prefill on the testbed costs about 12 ms a token (it keeps every position's logits), so the grid
# is small: two depths, filler sizes 48, 128 and about 360 local tokens (about 105, 187 and 420
# SmolLM2 tokens with the template). A cut at 120 tokens keeps the smallest whole, drops the
# question (keep head) or the needle at depth 0.1 (keep tail, about 44 tokens in) of the middle
# one, and loses both depths of the largest.
CUT = 120
NEEDLE = NeedleSettings(depths=(0.1, 0.5), min_size=48, shrink=2.8, upper_shares=())
# The default depths (0.05, 0.5, 0.9) and upper shares (0.85, 0.7) on the same ladder: sizes 48,
# 127, about 250, 300 and 360 local tokens (about 105, 187, 310, 365 and 420 SmolLM2 tokens).
# Keeping the last half of the window (256 tokens) loses the 0.05 needle of the three largest
# (the 0.5 one survives: 0.5 x 420 < 256); the 127 size keeps all.
HALF = NeedleSettings(min_size=48, shrink=2.8)
FIT = UsageSettings(fit_sizes=(16, 64))  # about 53 and 100 tokens: below the cut
BRIEF = "Be brief."
DAYS = ("List the days of the week, one per line.",)
# Short loop-prone prompts keep each of the loop test's requests to about 25 prompt tokens.
SHORT_LISTS = ("List the days of the week.", "Name ten fruits.", "Count from one to twenty.", "Name the planets.")
FEW_LOOPS = LoopSettings(prompts=DAYS, repeats=1, samples=0, max_tokens=10, system=BRIEF)


@pytest.fixture(scope="module")
def testbed():
    with Testbed([EndpointSpec("target", model="smollm2"), EndpointSpec("ref", model="smollm2")], n_ctx=N_CTX) as tb:
        yield tb


class Memo:
    """A reference client that answers each distinct body once."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._answers: dict[str, dict[str, Any]] = {}

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps(body, sort_keys=True)
        if key not in self._answers:
            self._answers[key] = await self._client.chat(body)
        return self._answers[key]


@pytest.fixture(scope="module")
def memo():
    return {}


async def run(testbed, memo, settings: SentinelSettings, fault: dict[str, Any], *, confirm: bool = False):
    testbed.set_fault("target", fault)
    async with live_clients({n: testbed.base_url(n) for n in ("target", "ref")}) as clients:
        target = clients["target"]
        reference = memo.setdefault("ref", Memo(clients["ref"]))
        reference._client = clients["ref"]  # this run's HTTP session
        endpoint = dataclasses.replace(
            target.endpoint, deployment=target.endpoint.deployment.model_copy(update={"context_window": N_CTX})
        )
        ctx = ProbeContext(
            endpoint=endpoint, client=target, settings=ProbeSettings(), baselines=MemoryBaselines(),
            rng=np.random.default_rng(7), clock=FakeClock(), reference=reference, confirm=confirm,
        )
        result = await SentinelsProbe(settings).run(ctx)
    return result, testbed.counts("target")


async def test_an_honest_replica_passes(testbed, memo):
    loops = LoopSettings(prompts=SHORT_LISTS, repeats=1, sampled_prompts=1, samples=2, max_tokens=10, system=BRIEF)
    result, _ = await run(testbed, memo, SentinelSettings(usage=FIT, needle=NEEDLE, loops=loops), {})
    assert result.verdict == "pass", result.details["findings"]
    assert result.errors == 0
    sizes = result.details["needle"]["sizes"]
    assert len(sizes) == 3 and sizes[0] == 48 and 120 < sizes[1] < 135 and 300 < sizes[2] < 400
    assert result.details["needle"]["finding"] == "retrieved"
    assert result.details["needle"]["informative"] == 6  # the reference retrieves every cell
    assert result.details["usage"]["finding"] == "linear"
    assert result.details["usage"]["comparison"]["finding"] == "match"
    assert 0.9 < result.details["usage"]["slope"] < 1.2
    assert result.details["loops"]["finding"] == "clean"


@pytest.mark.parametrize(("keep", "report"), [("head", "processed"), ("tail", "original")])
async def test_a_silent_truncation_is_demoted_on_the_first_run(testbed, memo, keep, report):
    fault = {"truncate_prompt": {"tokens": CUT, "keep": keep, "report": report}}
    result, counts = await run(testbed, memo, SentinelSettings(usage=FIT, needle=NEEDLE, loops=FEW_LOOPS), fault)
    assert counts.get("truncate_prompt", 0) > 0
    assert (result.verdict, result.effect) == ("fail", "demote"), result.details["findings"]
    assert result.details["needle"]["finding"] == "truncation"
    assert result.details["needle"]["last_kept_size"] == 48
    expected_usage = "flattened" if report == "processed" else "linear"
    assert result.details["usage"]["finding"] == expected_usage


async def test_a_tail_keeping_cut_to_half_the_window_is_demoted(testbed, memo):
    settings = SentinelSettings(usage=FIT, needle=HALF, loops=FEW_LOOPS)
    fault = {"truncate_prompt": {"tokens": N_CTX // 2, "keep": "tail", "report": "original"}}
    result, counts = await run(testbed, memo, settings, fault)
    assert counts.get("truncate_prompt", 0) > 0
    needle = result.details["needle"]
    # The reference retrieves every cell of the three sizes above half the window. 48@0.05, the
    # needle in the first sentence of a 48-token filler, is borderline: the reference and the
    # (untruncated) target answer it either way with the engine's numerics, and one such flip below
    # the cut is noise the pattern tolerates (NeedleSettings.noise_cells).
    upper = [c for c in needle["cells"] if c["size"] > 200]
    assert len(upper) == 9 and all(c["expected"] for c in upper), needle["cells"]
    assert needle["finding"] == "truncation"
    if needle["noise"]:
        # A pattern that forgave a flip demotes in its confirmatory re-run (the audit's next round).
        assert (result.verdict, result.effect) == ("fail", "suspect"), needle
        result, _ = await run(testbed, memo, settings, fault, confirm=True)
        needle = result.details["needle"]
        assert needle["finding"] == "truncation"
    assert (result.verdict, result.effect) == ("fail", "demote"), needle
    assert len(needle["cut"]) >= 3 and all(int(k.split("@")[0]) > 200 for k in needle["cut"])
    assert set(needle["noise"]) <= {"48@0.05"}, needle
    assert needle["last_kept_size"] == 127


async def test_loops_at_five_percent_are_detected(testbed, memo):
    # 140 T=0 requests (4 short prompts x 35), the fault's draws seeded (seed 3). The test needs 3
    # loops: at a 5% rate that happens with probability 0.97 over seeds. No usage or needle cells.
    loops = LoopSettings(prompts=SHORT_LISTS, repeats=35, samples=0, max_tokens=10, system=BRIEF)
    settings = SentinelSettings(loops=loops, usage=UsageSettings(fit_sizes=()), needle=NeedleSettings(depths=()))
    fault = {"loop": {"after_tokens": 2, "rate": 0.05}, "seed": 3}
    result, counts = await run(testbed, memo, settings, fault)
    assert counts.get("loop", 0) >= 3
    assert (result.verdict, result.effect) == ("fail", "suspect"), result.details["findings"]
    assert result.details["findings"] == ["loops:loops"]
    assert result.details["loops"]["loops"] == counts["loop"]
    assert result.requests == 140
