"""An audit ends within `probes.audit.seconds`: a probe still running at the end of its share is
stopped (nothing it started keeps sending) and reported inconclusive with the reason, the probes
after it still get their time, and a scheduled run ends within the scheduler's liveness limit."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from gateway.health_states import HealthStates
from gateway.state_store.memory import MemoryStore
from kernel.tasks import Heartbeat
from probes.base import ProbeContext, ProbeResult
from probes.registry import ProbeRegistry
from probes.scheduler import ProbeScheduler, scheduler_limit_s
from probes.settings import AUDIT_MARGIN_S, AuditSettings, ProbeSettings
from tests.probes.test_runner import A, Script, make_runner

GUARD = 10.0  # seconds: a test that has not returned by then has no bound


class DropsOneCancel:
    """A probe whose awaited call drops one cancel (as Python 3.11's wait_for can), then works on
    (100 requests, about a second) and answers as if nothing happened."""

    name = "drops"
    effect = "evidence"
    sent = 0

    def applicable(self, endpoint: Any) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            pass
        for _ in range(100):
            await ctx.client.chat({"messages": [{"role": "user", "content": "again"}], "max_tokens": 1})
            DropsOneCancel.sent += 1
            await asyncio.sleep(0.01)
        return ProbeResult(self.name, "pass", 10, p_value=0.5, effect="evidence")


class Endless:
    """A probe that sends a request every 10 ms until it is stopped, noting when (the loop's clock)."""

    name = "endless"
    effect = "evidence"
    sent: list[float] = []
    deadlines: list[float | None] = []

    def applicable(self, endpoint: Any) -> str | None:
        return None

    async def run(self, ctx: ProbeContext) -> ProbeResult:
        Endless.deadlines.append(ctx.deadline)
        loop = asyncio.get_running_loop()
        while True:
            await ctx.client.chat({"messages": [{"role": "user", "content": "again"}], "max_tokens": 1})
            Endless.sent.append(loop.time())
            await asyncio.sleep(0.01)


def probes_of(results: list[ProbeResult]) -> list[ProbeResult]:
    return [r for r in results if r.probe != "consistency"]  # the round's own check, always there


def runner_with_endless(script: Script, audit: AuditSettings, **settings: Any) -> Any:
    runner, health, clock = make_runner(script, audit=audit, **settings)
    factories = {"endless": Endless, "drops": DropsOneCancel, "fidelity": script.probe("fidelity"), "logprob_drift": script.probe("logprob_drift"),
                 "distribution": script.probe("distribution", "confirm")}
    runner.registry = ProbeRegistry(factories)  # type: ignore[arg-type]
    Endless.sent, Endless.deadlines, DropsOneCancel.sent = [], [], 0
    return runner, health


async def test_a_probe_that_outlasts_the_audit_is_stopped_and_inconclusive() -> None:
    runner, health = runner_with_endless(Script(), AuditSettings(seconds=0.6, keep_seconds=0.0, confirm_share=0.0))
    began = asyncio.get_running_loop().time()
    report = await asyncio.wait_for(runner.run(A.id, ["endless"], trigger="manual"), GUARD)
    (told,) = Endless.deadlines
    assert told == pytest.approx(began + 0.6, abs=0.1)  # the whole audit: no later probe, no confirm share
    (result,) = probes_of(report.rounds[0].results)
    assert result.verdict == "inconclusive" and result.details is not None and result.details["out_of_time"] is True
    assert "time ran out" in result.details["reason"] and result.requests > 0
    assert health.state(A.id) == "healthy"  # no time is no evidence
    # Stopped at its end: at most the send that was due in the same turn of the loop came after it...
    assert sum(t > told for t in Endless.sent) <= 1
    stopped = len(Endless.sent)
    await asyncio.sleep(0.2)
    assert len(Endless.sent) == stopped  # ...and nothing it started keeps sending


async def test_a_probe_that_drops_the_stopping_cancel_is_stopped_all_the_same() -> None:
    """asyncio.timeout_at cancels once: a probe that dropped that cancel ran on past its end (its
    100 requests) and its late answer was used."""
    runner, _ = runner_with_endless(Script(), AuditSettings(seconds=0.3, keep_seconds=0.0, confirm_share=0.0))
    report = await asyncio.wait_for(runner.run(A.id, ["drops"], trigger="manual"), GUARD)
    (result,) = probes_of(report.rounds[0].results)
    assert result.verdict == "inconclusive" and (result.details or {})["out_of_time"] is True
    stopped = DropsOneCancel.sent
    assert stopped < 100
    await asyncio.sleep(0.2)
    assert DropsOneCancel.sent == stopped


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
    leases: list[float] = []
    store = MemoryStore(wall)
    acquire = store.lease_acquire

    async def recording(key: str, owner: str, ttl_s: float) -> bool:
        leases.append(ttl_s)
        return await acquire(key, owner, ttl_s)

    store.lease_acquire = recording  # type: ignore[method-assign]
    sched = ProbeScheduler(runner, runner.settings, health, store, endpoints=[A.id], owner="r1",
                           clock=wall, sleep=asyncio.sleep, rng=random.Random(0))
    wall.advance(3_601.0)
    ran = await asyncio.wait_for(sched.tick(), GUARD)
    assert ran == 1 and leases  # it ran under its lease


class Mono:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


class WholeAudit:
    """Scheduled jobs that each take the whole audit and its margin but a second."""

    def __init__(self, clock: Mono, settings: ProbeSettings) -> None:
        self.clock, self.settings = clock, settings
        self.registry = ProbeRegistry({"logprob_drift": Endless})  # type: ignore[dict-item]

    async def run(self, endpoint_id: str, probes: list[str], **kw: Any) -> None:
        self.clock.t += self.settings.audit.seconds + AUDIT_MARGIN_S - 1.0


async def test_the_pause_before_a_job_does_not_count_against_its_liveness() -> None:
    """The heartbeat beat after a job only: a job that took its whole audit after a pause of up to
    a minute went past the limit, and /readyz said the scheduler was stuck."""
    settings = ProbeSettings(intervals={"logprob_drift": 3600.0})
    mono = Mono()
    beat = Heartbeat("probe scheduler", scheduler_limit_s(settings), clock=mono)
    ages: list[float] = []
    ok = beat.ok

    def recording_ok() -> None:
        ages.append(mono() - beat._since)
        ok()

    beat.ok = recording_ok  # type: ignore[method-assign]

    async def sleep(seconds: float) -> None:
        mono.t += seconds
        await asyncio.sleep(0)

    sched = ProbeScheduler(WholeAudit(mono, settings), settings, HealthStates(), MemoryStore(mono),  # type: ignore[arg-type]
                           endpoints=["a"], owner="r1", clock=mono, sleep=sleep, rng=random.Random(0), beat=beat)
    task = asyncio.create_task(sched.run_forever())
    while sched.runs < 50:
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert max(ages) <= beat.limit_s


def test_the_schedulers_liveness_limit_outlasts_an_audit() -> None:
    runner, health = runner_with_endless(Script(), AuditSettings(seconds=1_500.0), lease_seconds=3_600.0)
    sched = ProbeScheduler(runner, runner.settings, health, MemoryStore(runner.wall), endpoints=[A.id], owner="r1",
                           clock=runner.wall)
    assert sched.beat.limit_s >= 1_500.0 + AUDIT_MARGIN_S
