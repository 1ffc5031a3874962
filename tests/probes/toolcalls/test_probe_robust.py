"""The active suite is not aborted by one case and stops when it is stopped:
- a case the reference cannot serve (a 400 for `tool_choice: "required"` among several tools, as
  llama-cpp-python's chat format gave) is dropped from the comparison and counted, never fatal;
- the reference side raising, or the probe being cancelled, stops the endpoint side at once (no
  request starts after that settles);
- against a slow endpoint the suite adapts its concurrency to the measured latency, and says
  `inconclusive` with the reason when its time runs out."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from probes.base import ProbeContext
from probes.baselines import MemoryBaselines
from probes.client import ProbeRejected
from probes.settings import ProbeSettings, ToolCallSettings
from probes.toolcalls.cases import load_suite
from probes.toolcalls.probe import ToolCallProbe
from tests.fakes.catalog import make_endpoint
from tests.probes.toolcalls.fakes import FakeToolClient, expectations_of

SUITE = load_suite()
EXPECT = expectations_of(SUITE.cases)
DELAY = 0.01  # seconds per fake request


def forced_among_several(body: dict[str, Any]) -> bool:
    return body.get("tool_choice") == "required" and len(body.get("tools") or []) > 1


class SlowClient(FakeToolClient):
    """Answers after `delay` seconds; counts requests started and those in flight."""

    def __init__(self, endpoint_id: str, *, delay: float = DELAY, reject: Any = None, explode_after: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(endpoint_id, expectations=EXPECT, **kwargs)
        self.delay = delay
        self.reject = reject
        self.explode_after = explode_after
        self.started = 0
        self.in_flight = 0
        self.peak = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.started += 1
        if self.explode_after is not None and self.started > self.explode_after:
            raise RuntimeError("the reference's adapter has a bug")
        if self.reject is not None and self.reject(body):
            self.requests += 1
            raise ProbeRejected(f"{self.endpoint_id}: cannot force a call among several tools", status=400)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return await super().chat(body)


def context(ep: FakeToolClient, reference: FakeToolClient | None = None, **toolcalls: Any) -> ProbeContext:
    return ProbeContext(
        endpoint=make_endpoint(ep.endpoint_id, "m"), client=ep,  # type: ignore[arg-type]
        settings=ProbeSettings(toolcalls=ToolCallSettings(**toolcalls)), baselines=MemoryBaselines(),
        rng=np.random.default_rng(0), clock=lambda: 1_700_000_000.0, reference=reference,  # type: ignore[arg-type]
    )


async def settle(client: SlowClient) -> int:
    """Requests started once everything left running has had the time to run the whole suite twice."""
    await asyncio.sleep(2 * DELAY * len(SUITE.cases))
    return client.started


async def test_cases_the_reference_cannot_serve_are_dropped_and_counted() -> None:
    ref = SlowClient("local/ref", reject=forced_among_several)
    result = await ToolCallProbe(SUITE).run(context(SlowClient("fake/ep"), ref))
    rejected = sorted(c.id for c in SUITE.cases if forced_among_several(c.request()))
    assert rejected  # the suite has such cases
    details: Any = result.details
    assert result.verdict == "pass", details
    assert details["dropped"]["reference_rejected"] == rejected
    assert result.samples == details["figures"]["judged"] and details["truth"] == "reference"
    assert ref.requests == len(SUITE.cases) and result.reference_samples is not None
    assert result.errors == 0  # the reference's refusals are not the endpoint's errors


async def test_the_reference_side_raising_stops_the_endpoint_side() -> None:
    ep = SlowClient("fake/ep")
    with pytest.raises(RuntimeError):
        await ToolCallProbe(SUITE).run(context(ep, SlowClient("local/ref", explode_after=3)))
    stopped_at = ep.started
    assert stopped_at < len(SUITE.cases)
    assert await settle(ep) == stopped_at and ep.in_flight == 0


async def test_a_cancelled_probe_sends_nothing_more() -> None:
    ep, ref = SlowClient("fake/ep"), SlowClient("local/ref")
    task = asyncio.create_task(ToolCallProbe(SUITE).run(context(ep, ref)))
    while ep.started < 8:
        await asyncio.sleep(DELAY / 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stopped = (ep.started, ref.started)
    await settle(ep)
    assert (ep.started, ref.started) == stopped and ep.in_flight == 0 == ref.in_flight


async def test_a_slow_endpoint_gets_more_concurrency_to_finish_in_time() -> None:
    # At the fixed concurrency of 4 the suite would need 120 * 0.05 / 4 = 1.5 s; it has 1 s.
    ep = SlowClient("fake/ep", delay=0.05)
    t0 = time.perf_counter()
    result = await ToolCallProbe(SUITE).run(context(ep, concurrency=4, time_budget=1.0, max_concurrency=16))
    assert time.perf_counter() - t0 < 1.5
    assert ep.peak > 4 and result.verdict == "pass", result.details


async def test_time_running_out_is_inconclusive_with_the_reason() -> None:
    # Even at 16 at once, 120 requests of 0.5 s need 3.75 s; it has 0.6 s: a few answered, too few to judge.
    ep = SlowClient("fake/ep", delay=0.5)
    result = await ToolCallProbe(SUITE).run(context(ep, time_budget=0.6, max_concurrency=16))
    details: Any = result.details
    assert result.verdict == "inconclusive"
    assert "time" in details["reason"] and details["unanswered"] > 0
    stopped_at = ep.started
    await asyncio.sleep(1.0)  # nothing left running
    assert ep.started == stopped_at and ep.in_flight == 0


async def test_the_suite_is_sent_in_a_fresh_order_each_run() -> None:
    # A fixed sequence of known prompts would tell a provider that the suite is running.
    orders = []
    for seed in (1, 2):
        ep = SlowClient("fake/ep", delay=0.0)
        sent: list[str] = []
        chat = ep.chat

        async def recording(body: dict[str, Any], chat: Any = chat, sent: list[str] = sent) -> dict[str, Any]:
            sent.append(body["messages"][0]["content"])
            return await chat(body)

        ep.chat = recording  # type: ignore[method-assign]
        ctx = context(ep, concurrency=1)
        ctx.rng = np.random.default_rng(seed)
        result = await ToolCallProbe(SUITE).run(ctx)
        assert result.verdict == "pass"
        orders.append(sent)
    suite_order = [c.messages[0]["content"] for c in SUITE.cases]
    assert sorted(orders[0]) == sorted(orders[1]) == sorted(suite_order)
    assert orders[0] != suite_order and orders[1] != suite_order and orders[0] != orders[1]


async def test_the_suite_stops_by_the_end_of_its_share_of_the_audit() -> None:
    """The audit's deadline (the runner's share for this probe) comes before the suite's own budget:
    the suite stops by then on its own, keeping and judging what it has, and says why."""
    ep = SlowClient("fake/ep", delay=0.5)
    ctx = context(ep, time_budget=300.0, max_concurrency=16)
    ctx.deadline = asyncio.get_running_loop().time() + 0.6
    t0 = time.perf_counter()
    result = await ToolCallProbe(SUITE).run(ctx)
    assert time.perf_counter() - t0 < 0.9
    details: Any = result.details
    assert result.verdict == "inconclusive" and "time ran out" in details["reason"] and details["unanswered"] > 0


class SlowBaselines(MemoryBaselines):
    async def get(self, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(1.0)  # a slow state store read before the reference's missing cases run
        return await super().get(*args, **kwargs)


async def test_the_reference_side_stops_by_the_same_moment_as_the_endpoint_side() -> None:
    """The reference side counted its time from after its baseline read: it ran past the probe's
    deadline, and the runner's stop then threw away every answer the endpoint had given."""
    ep, ref = SlowClient("fake/ep", delay=0.05), SlowClient("local/ref", delay=0.05)
    ctx = context(ep, ref, time_budget=300.0, max_concurrency=16)
    ctx.baselines = SlowBaselines()
    ctx.deadline = asyncio.get_running_loop().time() + 1.5
    result = await ToolCallProbe(SUITE).run(ctx)
    assert asyncio.get_running_loop().time() <= ctx.deadline  # returned before the runner would stop it
    assert result.verdict == "pass" and result.samples > 0
