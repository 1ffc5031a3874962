"""The fleet's e-BH gate: each result's e-value, a round's ledger in the state store (memory here,
as the app's MemoryStore), and the runner holding back a demotion e-BH does not admit."""

from __future__ import annotations

import pytest

from gateway.state_store.memory import MemoryStore
from probes.base import ProbeResult
from probes.fleet import E_CAP, FleetLedger, audit_e, result_e
from probes.settings import FleetSettings
from probes.stats.evalues import calibrate
from tests.fakes.clock import FakeClock
from tests.probes.test_runner import A, Script, make_runner

DAY = 86_400.0


def res(verdict: str = "fail", p: float | None = 0.0001, **kw: object) -> ProbeResult:
    return ProbeResult("fidelity", verdict, 10, p_value=p, **kw)  # type: ignore[arg-type]


def test_a_result_s_e_value_is_its_own_grounds_p_value_calibrated() -> None:
    assert result_e(res(p=0.0001), 0.5) == pytest.approx(50.0)  # 0.5 / sqrt(1e-4)
    assert result_e(res("pass", p=1.0), 0.5) == 0.5
    # A comparison with the reference alone is no evidence against an honest endpoint on another engine.
    assert result_e(res(p=1e-9, grounds="reference"), 0.5) == 1.0
    # Drift names its golden window's p-value; the combined (reference) one is not used.
    drift = ProbeResult("logprob_drift", "fail", 10, p_value=1e-9, grounds="reference", details={"self_p_value": 0.25})
    assert result_e(drift, 0.5) == 1.0
    assert result_e(ProbeResult("logprob_drift", "pass", 10, p_value=0.01, details={"self_p_value": None}), 0.5) == 1.0
    assert result_e(res("error", p=None), 0.5) == result_e(res("inconclusive", p=0.0), 0.5) == 1.0
    assert result_e(res(p=0.0), 0.5) == E_CAP  # finite, so it stores as JSON
    assert audit_e([res(p=0.0001), res("pass", p=1.0)], 0.5) == pytest.approx(25.0)


async def test_e_bh_over_the_round_s_proposed_demotions() -> None:
    """10 endpoints at FDR 0.1: one demotion needs e >= 100, two need e >= 50 each."""
    clock = FakeClock(start=10 * DAY)
    ledger = FleetLedger(MemoryStore(clock), FleetSettings(alpha=0.1), lambda: 10, prefix="t-fleet-1:")
    e = calibrate(0.0004, 0.5)  # 25
    for ep in ("a", "b"):
        assert await ledger.record(ep, [res(p=0.0004), res(p=0.0004)], now=clock()) == pytest.approx(e * e)  # 625
    assert await ledger.record("c", [res(p=0.0004)], now=clock()) == pytest.approx(e)
    await ledger.record("honest", [res("pass", p=0.9)], now=clock())
    first = await ledger.gate("c", now=clock())
    assert not first.allowed and first.ebh.threshold == 100.0 and "holds it back" in first.describe()
    assert (await ledger.gate("a", now=clock())).allowed
    # With a and b proposed, the bar for two is 50: c (25) still short of it, and is not revisited.
    assert (await ledger.gate("b", now=clock())).allowed
    snap = await ledger.snapshot(now=clock())
    assert (snap["n"], snap["k"], snap["demoted"], snap["held"], snap["alpha"]) == (10, 2, 2, 1, 0.1)
    assert [row["endpoint"] for row in snap["endpoints"]][:2] == ["a", "b"]
    # The next round starts afresh.
    clock.advance(DAY)
    fresh = await ledger.snapshot(now=clock())
    assert fresh["endpoints"] == [] and fresh["round"] == snap["round"] + 1


async def test_the_runner_holds_back_a_demotion_the_fleet_does_not_admit() -> None:
    """p = 0.001 per failing probe: the audit's product e = 15.8^3 * 0.71 = 2.8e3, enough for a
    fleet of 10 (bar 100) and not for one of 100 000 (bar 1e6): then SUSPECT, with the reason."""
    for fleet, expected in ((10, "demoted"), (100_000, "suspect")):
        script = Script({"logprob_drift": ["fail"], "distribution": ["fail"]})
        runner, health, clock = make_runner(script)
        runner.fleet = FleetLedger(
            MemoryStore(clock), FleetSettings(alpha=0.1), lambda n=fleet: n, prefix=f"t-fleet-{fleet}:"
        )
        report = await runner.run(A.id, ["logprob_drift"], trigger="manual")
        assert health.state(A.id) == expected, report.rounds[-1].decision.reason
        reason = report.rounds[-1].decision.reason
        assert f"e-BH at FDR 0.1 over {fleet} endpoints" in reason
        assert ("admits it" in reason) == (expected == "demoted")
        snap = await runner.fleet.snapshot(now=clock())
        assert snap["endpoints"][0]["e_value"] == pytest.approx(calibrate(0.001, 0.5) ** 3 * calibrate(0.5, 0.5))


async def test_scheduled_windows_do_not_feed_the_round() -> None:
    script = Script({"fidelity": ["pass"]})
    runner, _, clock = make_runner(script)
    runner.fleet = FleetLedger(MemoryStore(clock), FleetSettings(), lambda: 2, prefix="t-fleet-s:")
    await runner.run(A.id, ["fidelity"], trigger="schedule")
    assert (await runner.fleet.snapshot(now=clock()))["endpoints"] == []
    await runner.run(A.id, ["fidelity"], trigger="manual")
    assert [row["endpoint"] for row in (await runner.fleet.snapshot(now=clock()))["endpoints"]] == [A.id]
