"""An audit ends within `probes.audit.seconds`: a probe still running at the end of its share is
stopped (nothing it started keeps sending) and reported inconclusive with the reason, the probes
after it still get their time, and a scheduled run ends within the scheduler's liveness limit."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from gateway.state_store.memory import MemoryStore
from probes.base import ProbeContext, ProbeResult
from probes.registry import ProbeRegistry
from probes.scheduler import ProbeScheduler
from probes.settings import AuditSettings
from tests.probes.test_runner import A, Script, make_runner

GUARD = 10.0  # seconds: a test that has not returned by then has no bound


class Endless:
    """A probe that sends a request every 10 ms until it is stopped, counting what it sent."""

    name = "endless"
    effect = "evidence"
    sent = 0
    deadlines: list[float | None] = []

    def applicable(self, endpoint: Any) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        Endless.deadlines.append(ctx.deadline)
        while True:
            await ctx.client.chat({"messages": [{"role": "user", "content": "again"}], "max_tokens": 1})
            Endless.sent += 1
            await asyncio.sleep(0.01)


def probes_of(results: list[ProbeResult]) -> list[ProbeResult]:
    return [r for r in results if r.probe != "consistency"]  # the round's own check, always there


def runner_with_endless(script: Script, audit: AuditSettings, **settings: Any) -> Any:
    runner, health, clock = make_runner(script, audit=audit, **settings)
    factories = {"endless": Endless, "fidelity": script.probe("fidelity"), "logprob_drift": script.probe("logprob_drift"),
                 "distribution": script.probe("distribution", "confirm")}
    runner.registry = ProbeRegistry(factories)  # type: ignore[arg-type]
    Endless.sent, Endless.deadlines = 0, []
    return runner, health


async def test_a_probe_that_outlasts_the_audit_is_stopped_and_inconclusive() -> None:
    runner, health = runner_with_endless(Script(), AuditSettings(seconds=0.6, keep_seconds=0.0, confirm_share=0.0))
    began = time.perf_counter()
    report = await asyncio.wait_for(runner.run(A.id, ["endless"], trigger="manual"), GUARD)
    took = time.perf_counter() - began
    assert took < 0.6 + 0.5, took
    (result,) = probes_of(report.rounds[0].results)
    assert result.verdict == "inconclusive" and result.details is not None
    assert "time ran out" in result.details["reason"] and result.requests > 0
    assert health.state(A.id) == "healthy"  # no time is no evidence
    stopped = Endless.sent
    await asyncio.sleep(0.2)
    assert Endless.sent == stopped  # nothing it started keeps sending


async def test_the_probes_after_a_slow_one_still_get_their_time() -> None:
    script = Script()
    runner, _ = runner_with_endless(script, AuditSettings(seconds=1.0, keep_seconds=0.4, confirm_share=0.0))
    report = await asyncio.wait_for(runner.run(A.id, ["endless", "fidelity"], trigger="manual"), GUARD)
    assert [r.verdict for r in probes_of(report.rounds[0].results)] == ["inconclusive", "pass"]
    # It was told when its share ends (the audit's end less 0.4 s kept for fidelity).
    (told,) = Endless.deadlines
    assert told is not None
    assert [name for name, _ in script.seen] == ["fidelity"]
    assert script.seen[0][1].deadline is not None and script.seen[0][1].deadline - told == pytest.approx(0.4, abs=0.1)


async def test_a_confirmatory_round_with_no_time_left_sends_nothing() -> None:
    """The first round used the whole audit (no confirmatory share): the re-run cannot happen,
    says so, and leaves the alarm standing (SUSPECT, not cleared and not demoted)."""
    script = Script({"logprob_drift": ["fail"]})
    runner, health = runner_with_endless(script, AuditSettings(seconds=0.5, keep_seconds=0.0, confirm_share=0.0))
    report = await asyncio.wait_for(runner.run(A.id, ["logprob_drift", "endless"], trigger="manual"), GUARD)
    assert [r.confirm for r in report.rounds] == [False, True]
    confirm = probes_of(report.rounds[1].results)
    assert confirm and all(r.verdict == "inconclusive" and r.requests == 0 for r in confirm)
    assert all("no time left" in (r.details or {})["reason"] for r in confirm)
    assert [name for name, ctx in script.seen if ctx.confirm] == []
    assert health.state(A.id) == "suspect"


async def test_a_timeout_of_the_probes_own_is_an_error_not_the_audits() -> None:
    script = Script({"fidelity": [TimeoutError("its own request timed out")]})
    runner, _ = runner_with_endless(script, AuditSettings(seconds=30.0))
    report = await runner.run(A.id, ["fidelity"], trigger="manual")
    (result,) = probes_of(report.rounds[0].results)
    assert result.verdict == "error" and "TimeoutError" in (result.details or {})["error"]


async def test_a_scheduled_run_ends_within_the_schedulers_liveness_limit() -> None:
    """Without a bound, a probe that never ends (an agent eval on a slow endpoint) held the
    scheduler's tick for good and its heartbeat went stale: /readyz said the scheduler was stuck."""
    runner, health = runner_with_endless(Script(), AuditSettings(seconds=0.5, keep_seconds=0.0, confirm_share=0.0),
                                         intervals={"endless": 3600.0}, jitter=0.0)
    wall = runner.wall
    sched = ProbeScheduler(runner, runner.settings, health, MemoryStore(wall), endpoints=[A.id], owner="r1",
                           clock=wall, sleep=asyncio.sleep, rng=random.Random(0))
    wall.advance(3_601.0)
    ran = await asyncio.wait_for(sched.tick(), GUARD)
    assert ran == 1 and sched.beat.limit_s > runner.settings.audit.seconds


def test_the_schedulers_liveness_limit_outlasts_an_audit() -> None:
    runner, health = runner_with_endless(Script(), AuditSettings(seconds=1_500.0), lease_seconds=3_600.0)
    sched = ProbeScheduler(runner, runner.settings, health, MemoryStore(runner.wall), endpoints=[A.id], owner="r1",
                           clock=runner.wall)
    assert sched.beat.limit_s > 1_500.0
