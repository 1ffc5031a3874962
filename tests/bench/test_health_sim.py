"""bench/health_sim.py: its probe models report what the real probes would, and its fleets run the
real runner, policy and fleet gate (tiny configurations, simulated days)."""

from __future__ import annotations

import asyncio
import random

from bench.health_sim import Models, Profile, Tally, simulate_fleet
from probes.base import ProbeResult
from probes.logprob_drift import drift_permutations
from probes.settings import ProbeSettings

DAY = 86_400.0
SETTINGS = ProbeSettings()


class DriftOnly(Models):
    """Every probe but drift passes: what moves the endpoint is drift's evidence alone."""

    def result(self, name: str, profile: Profile, confirm: bool) -> ProbeResult:
        if name == "logprob_drift":
            return self.drift(profile, confirm)
        out = super().result(name, profile, confirm)
        return ProbeResult(name, "pass", out.samples, p_value=1.0, e_value=None, effect=out.effect, grounds=out.grounds)


class QuietGolden(DriftOnly):
    """...and drift's golden window never rejects: every drift failure rests on the reference alone."""

    def null_p(self, permutations: int | None, tests: int = 1) -> float:
        return 1.0


def fleet(profiles: dict[str, Profile], days: float, *, seed: int = 7, models: type[Models] = DriftOnly,
          **kw: object) -> dict[str, Tally]:
    rng = random.Random(seed)
    return asyncio.run(simulate_fleet(rng, SETTINGS, profiles, seconds=days * DAY, models=models(SETTINGS, rng), **kw))  # type: ignore[arg-type]


def test_drift_results_carry_the_probe_s_grounds_floors_and_golden_p_value() -> None:
    models = Models(SETTINGS, random.Random(1))
    floor = 4 / (drift_permutations(SETTINGS, confirm=False, tests=8) + 1)
    other_engine = [models.drift(Profile("honest", "equality"), False) for _ in range(200)]
    # Judged by the equality test, another engine fails every window, on the reference alone unless
    # its golden window rejects at its own share of alpha (a null p-value does that 2.5% of the time).
    assert {r.verdict for r in other_engine} == {"fail"}
    own_share = [2 * (r.details or {})["self_p_value"] <= SETTINGS.drift.alpha for r in other_engine]
    assert [r.grounds == "self" for r in other_engine] == own_share and 0 < sum(own_share) < 20
    assert all(r.p_value == 2 * floor and r.e_value == 10.5 for r in other_engine)
    assert all((r.details or {})["self_p_value"] >= floor for r in other_engine)
    # Calibrated: the reference side fails at about calibration_fpr per window.
    calibrated = [models.drift(Profile("honest", "calibrated"), False) for _ in range(4000)]
    share = sum(r.verdict == "fail" and r.grounds == "reference" for r in calibrated) / len(calibrated)
    assert 0.5 * SETTINGS.drift.calibration_fpr < share < 2 * SETTINGS.drift.calibration_fpr
    # A fault the golden window sees has the endpoint's own grounds; a reference-only one does not.
    own = [models.drift(Profile("own", "same", 0.99), False) for _ in range(200)]
    assert sum(r.verdict == "fail" and r.grounds == "self" for r in own) > 150
    ref_only = [models.drift(Profile("reference-only", "same", 0.99), False) for _ in range(200)]
    assert sum(r.verdict == "fail" for r in ref_only) > 150
    assert all(r.grounds == "reference" for r in ref_only if r.verdict == "fail" and
               2 * (r.details or {})["self_p_value"] > SETTINGS.drift.alpha)


def test_reference_only_failures_never_demote() -> None:
    """Failing drift against the reference every hour for days (an honest endpoint on another engine
    judged by the equality test, and a fault the golden window was frozen with), with nothing on the
    endpoint's own grounds failing, raises SUSPECT and proposes demotions the policy holds: never
    DEMOTED, without the fleet's gate too."""
    tallies = fleet({"other-engine": Profile("honest", "equality"),
                     "baked-in": Profile("reference-only", "same", 0.99)}, 4, models=QuietGolden, gate=False)
    for t in tallies.values():
        assert t.demotions == 0 and t.first_demoted is None
        assert t.suspects >= 1 and t.held_reference >= 1 and t.confirm_rounds >= 1
        # The reference-only hold: one confirmatory round per reference_hold_seconds, not one a window.
        assert t.confirm_rounds <= 4 * 86_400 / SETTINGS.health.reference_hold_seconds + 1


def test_an_own_ground_fault_is_demoted_and_the_fleet_gate_can_hold_it() -> None:
    own = {"faulty": Profile("own", "same", 0.95), "honest": Profile("honest", "same")}
    ungated = fleet(own, 3, gate=False)
    assert ungated["faulty"].first_demoted is not None and ungated["faulty"].first_demoted < 2 * DAY
    gated = fleet(own, 3, gate=True)
    assert gated["faulty"].first_demoted is not None  # a fleet of 2: the bar is 2 / 0.1 = 20
    # A fleet so large that no round's e-value reaches its bar (n / alpha above the ledger's cap):
    # the same fault is held back, SUSPECT, every time it is proposed.
    held = fleet(own, 3, gate=True, fleet_size=10**13)
    assert held["faulty"].demotions == 0 and held["faulty"].held >= 1
