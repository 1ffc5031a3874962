"""Endpoint-months of the health policy: how often an honest endpoint is demoted, how fast a faulty one is.

A fleet of `--fleet` endpoints on one injected clock, each probe on the scheduler's timetable
(`ProbeSettings.intervals`, jitter, the demoted slowdown), every scheduled round run through the
real `probes.runner.ProbeRunner`: `probes.policy.decide` on the real `EvidenceState` (kept in a
`MemoryStore`), the confirmatory round the runner runs after a decision asking for one
(`ProbeRegistry.confirmatory`), and the fleet's e-BH gate (`probes.fleet.FleetLedger`, one ledger
for the whole fleet, n = the fleet's size) on every proposed demotion. Only the probes are
replaced: by p-value models that return what the real probe would, its effect, verdict at its
alpha (confirm_alpha in a confirmatory round), window e-value, grounds and, for drift, the golden
window's own p-value (`self_p_value`, what the fleet's e-value reads):

- drift: a golden-window test (Bonferroni over its 4 prompts) and, with a reference engine, a
  reference comparison, Bonferroni over both; its grounds are `probes.logprob_drift.grounds`.
  Honest golden p-values are permutation p-values (1+#)/(B+1) at the probe's B (`--null
  permutation`) or uniform (`--null uniform`). The honest reference comparison (`--reference`):
  `none` (no reference engine), `same` (the reference runs the same engine: null like the golden
  test), `calibrated` (the equivalence test against the cross-engine margin: some prompt beyond it,
  at the permutation floor, with probability `drift.calibration_fpr` per comparison, else p = 1),
  `equality` (another engine judged by the equality test, as at the defaults today, the bundled
  calibration being unused: fails at the permutation floor every time);
- distribution, fidelity, toolcalls, sentinels, agent: null p-values, failing at their alpha
  (toolcalls and sentinels at their nominal alpha, a worst case for those discrete tests);
  distribution's failures have grounds "reference" when there is a reference engine.

Faulty endpoints (`--faulty-per-fleet` of each kind in every fleet) carry a drift fault that a
window catches with probability `--power` at its Bonferroni share of alpha, as a shifted one-sided
z-test (so the re-run at confirm_alpha has less power), floored at the permutation floor:

- `own`: visible to the endpoint's own golden window (a change since the window was frozen), and to
  the reference comparison;
- `reference-only`: visible to the reference comparison alone (the golden window was frozen with the
  fault in it). By the policy's design it is never demoted on that evidence alone.

    .venv/bin/python bench/health_sim.py --quick           # 1 fleet-month of 20 endpoints per reference mode
    .venv/bin/python bench/health_sim.py                   # 10 fleet-months of 20 per reference mode
    .venv/bin/python bench/health_sim.py --reference equality --fleet 50 --set suspect_e=20
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import logging
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, ClassVar, Literal

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.catalog import Catalog, Endpoint  # noqa: E402
from gateway.health_states import HealthStates  # noqa: E402
from gateway.state_store.memory import MemoryStore  # noqa: E402
from kernel.deployment import Capabilities, DeploymentConfig, Price  # noqa: E402
from probes.base import Effect, Outcome, ProbeContext, ProbeResult, verdict_from_p  # noqa: E402
from probes.baselines import MemoryBaselines  # noqa: E402
from probes.distribution import confirm_permutations  # noqa: E402
from probes.evidence import EvidenceStore  # noqa: E402
from probes.fleet import FleetLedger  # noqa: E402
from probes.logprob_drift import drift_permutations, grounds  # noqa: E402
from probes.registry import ProbeRegistry  # noqa: E402
from probes.runner import ProbeRunner  # noqa: E402
from probes.settings import HealthSettings, ProbeSettings  # noqa: E402
from probes.windowed import judged  # noqa: E402
from providers.base import Target  # noqa: E402
from providers.openai_compat import OpenAICompatAdapter  # noqa: E402

MONTH = 30 * 86_400.0
START = 1_700_000_000.0
Z = NormalDist()
Reference = Literal["none", "same", "calibrated", "equality"]
Kind = Literal["honest", "own", "reference-only"]
REFERENCES: tuple[Reference, ...] = ("same", "calibrated", "equality")
PROBES = ("logprob_drift", "distribution", "fidelity", "toolcalls", "sentinels", "agent")


@dataclass(frozen=True)
class Profile:
    kind: Kind = "honest"
    reference: Reference = "same"
    power: float = 0.8  # a faulty endpoint's drift window: P(fail) at its share of alpha


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeClient:
    """What the runner reads from a client: the counts (the p-value models make no requests)."""

    endpoint: Endpoint
    tokens: int = 0
    requests: int = 0
    errors: int = 0
    prompt_counts: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def endpoint_id(self) -> str:
        return self.endpoint.id


def endpoint(endpoint_id: str, model: str = "m") -> Endpoint:
    deployment = DeploymentConfig(model=model, provider=endpoint_id, id=endpoint_id, capabilities=Capabilities(),
                                  price=Price())
    target = Target(endpoint_id=endpoint_id, base_url="http://sim.invalid/v1", upstream_model=deployment.target_model,
                    public_model=model, api_key=None)
    return Endpoint(id=endpoint_id, model=model, provider=endpoint_id, kind="openai", region="sim", keeps_prompts=False,
                    deployment=deployment, target=target, adapter=OpenAICompatAdapter(), ready=None)


class Models:
    """The probes' p-value models: `result(endpoint's profile, probe, confirm)` -> what it reports."""

    def __init__(self, settings: ProbeSettings, rng: random.Random, null: str = "permutation") -> None:
        self.s, self.rng, self.null = settings, rng, null

    def null_p(self, permutations: int | None, tests: int = 1) -> float:
        if permutations is None or self.null == "uniform":
            return self.rng.random()
        smallest = min(self.rng.randint(0, permutations) for _ in range(tests))  # permuted statistics >= observed
        return min(1.0, tests * (1 + smallest) / (permutations + 1))

    def fault_p(self, power: float, alpha: float, floor: float) -> float:
        shift = Z.inv_cdf(1 - alpha) + Z.inv_cdf(power)
        return max(floor, 1.0 - Z.cdf(self.rng.gauss(0.0, 1.0) + shift))

    def drift(self, profile: Profile, confirm: bool) -> ProbeResult:
        s = self.s
        prompts = len(s.drift.prompts)
        sides = 1 if profile.reference == "none" else 2
        b = drift_permutations(s, confirm=confirm, tests=prompts * sides)
        floor = prompts / (b + 1)  # Bonferroni over the prompts of one comparison
        alpha = s.health.confirm_alpha if confirm else s.drift.alpha
        window_alpha = s.drift.alpha / sides  # where `power` is stated: one comparison's share of the window's alpha
        golden = self.null_p(b, prompts)
        if profile.kind == "own":
            golden = self.fault_p(profile.power, window_alpha, floor)
        comparisons = {"golden": Outcome(0.0, p_value=golden)}
        if sides == 2:
            honest = {
                "same": lambda: self.null_p(b, prompts),
                "calibrated": lambda: floor if self.rng.random() < s.drift.calibration_fpr else 1.0,
                "equality": lambda: floor,
            }[profile.reference]()
            ref = min(honest, self.fault_p(profile.power, window_alpha, floor)) if profile.kind != "honest" else honest
            comparisons["reference"] = Outcome(0.0, p_value=ref)
        p = min(1.0, len(comparisons) * min(float(o.p_value or 1.0) for o in comparisons.values()))
        verdict, outcome = judged(Outcome(0.0, p_value=p, samples=40), alpha, s.health)
        return ProbeResult.of("logprob_drift", verdict, outcome, effect="evidence",
                              grounds=grounds(verdict, comparisons, alpha), self_p_value=golden, alpha=alpha)

    def result(self, name: str, profile: Profile, confirm: bool) -> ProbeResult:
        if name == "logprob_drift":
            return self.drift(profile, confirm)
        s, health = self.s, self.s.health
        if name == "distribution":
            alpha = health.confirm_alpha if confirm else s.distribution.alpha
            p = self.null_p(confirm_permutations(s.distribution.permutations, alpha, confirm))
            verdict, outcome = judged(Outcome(0.0, p_value=p, samples=250), alpha, health)
            return ProbeResult.of(name, verdict, outcome, effect="confirm",
                                  grounds="self" if profile.reference == "none" else "reference")
        if name == "fidelity":
            alpha = health.confirm_alpha if confirm else s.fidelity.alpha
            verdict, outcome = judged(Outcome(0.0, p_value=self.rng.random(), samples=200), alpha, health)
            return ProbeResult.of(name, verdict, outcome, effect="evidence")
        nominal = {"toolcalls": s.toolcalls.alpha, "sentinels": s.sentinels.loops.alpha, "agent": s.agent.alpha}[name]
        alpha = min(nominal, health.confirm_alpha) if confirm else nominal
        effect: Effect = {"toolcalls": "confirm", "sentinels": "suspect", "agent": "evidence"}[name]  # type: ignore[assignment]
        p = self.rng.random()
        return ProbeResult(name, verdict_from_p(p, alpha), 10, p_value=p, effect=effect)


def fake_probe(probe: str, models: Models, profiles: Mapping[str, Profile]) -> Callable[[], Any]:
    class Fake:
        name: ClassVar[str] = probe
        effect: ClassVar[str] = {"distribution": "confirm", "toolcalls": "confirm", "sentinels": "suspect"}.get(
            probe, "evidence")

        def applicable(self, ep: Endpoint) -> str | None:
            return None

        async def run(self, ctx: ProbeContext) -> ProbeResult:
            return models.result(probe, profiles[ctx.endpoint.id], ctx.confirm)

    return Fake


@dataclass
class Tally:
    """One endpoint over the simulated time."""

    profile: Profile
    demotions: int = 0
    suspects: int = 0
    confirm_rounds: int = 0
    held: int = 0  # proposed demotions the fleet's e-BH held back
    held_reference: int = 0  # proposed demotions the policy held: reference disagreement alone
    first_demoted: float | None = None  # seconds from the start
    suspect_seconds: float = 0.0  # time spent SUSPECT (routing weight suspect_weight)
    suspect_since: float | None = None
    causes: Counter[str] = field(default_factory=Counter)  # failing probes of each demoting round


async def simulate_fleet(rng: random.Random, settings: ProbeSettings, profiles: Mapping[str, Profile], *,
                         seconds: float = MONTH, null: str = "permutation", gate: bool = True,
                         fleet_size: int | None = None, models: Models | None = None) -> dict[str, Tally]:
    """The fleet `profiles` over `seconds` on an injected clock; `fleet_size` overrides the gate's n."""
    clock = Clock()
    models = models or Models(settings, rng, null)
    registry = ProbeRegistry({n: fake_probe(n, models, profiles) for n in PROBES})
    health = HealthStates()
    n = fleet_size or len(profiles)
    runner = ProbeRunner(
        catalog=Catalog([endpoint(ep) for ep in profiles], created=int(START)), health=health,
        settings=settings.model_copy(update={"template_check": False, "references": {}}), registry=registry,
        evidence=EvidenceStore(MemoryStore(clock)), baselines=MemoryBaselines(),
        client_factory=FakeClient,  # type: ignore[arg-type]
        wall=clock, rng=np.random.default_rng(rng.randrange(2**32)),
        fleet=FleetLedger(MemoryStore(clock), settings.fleet, lambda: n) if gate else None,
    )
    tallies = {ep: Tally(p) for ep, p in profiles.items()}
    due = [(START + rng.uniform(0, iv), ep, probe) for ep in profiles for probe, iv in settings.intervals.items()
           if probe in PROBES]
    heapq.heapify(due)
    while due:
        now, ep, probe = heapq.heappop(due)
        if now - START >= seconds:
            break
        clock.now = now
        report = await runner.run(ep, [probe], trigger="schedule")
        t = tallies[ep]
        for rnd in report.rounds:
            t.confirm_rounds += rnd.confirm
            reason = rnd.decision.reason
            t.held += "holds it back" in reason or "the fleet's round is unavailable" in reason
            t.held_reference += "not demoted, until an independent test" in reason
            if rnd.transition is None:
                continue
            t.suspects += rnd.transition.to_state == "suspect"
            if t.suspect_since is not None:
                t.suspect_seconds += now - t.suspect_since
            t.suspect_since = now if rnd.transition.to_state == "suspect" else None
            if rnd.transition.to_state == "demoted":
                t.demotions += 1
                t.causes[",".join(r.probe + (" (confirm)" if rnd.confirm else "") for r in rnd.results
                                  if r.verdict == "fail") or "e-CUSUM"] += 1
                if t.first_demoted is None:
                    t.first_demoted = now - START
        interval = settings.intervals[probe] * (settings.demoted_slowdown if health.state(ep) == "demoted" else 1.0)
        heapq.heappush(due, (now + interval * (1.0 + rng.uniform(-settings.jitter, settings.jitter)), ep, probe))
    for t in tallies.values():
        if t.suspect_since is not None:
            t.suspect_seconds += START + seconds - t.suspect_since
            t.suspect_since = None
    return tallies


def fleet_profiles(size: int, reference: Reference, faulty_per_kind: int, power: float) -> dict[str, Profile]:
    kinds: list[Kind] = ["own"] * faulty_per_kind + ["reference-only"] * faulty_per_kind
    kinds += ["honest"] * (size - len(kinds))
    return {f"ep-{i:03d}": Profile(k, reference, power) for i, k in enumerate(kinds)}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def hours_to_demoted(tallies: list[Tally]) -> str:
    hours = sorted(t.first_demoted / 3600 if t.first_demoted is not None else math.inf for t in tallies)
    if not hours:
        return "-"
    never = sum(math.isinf(h) for h in hours)
    if never == len(hours):
        return f"never ({never} of {len(hours)} not demoted in 30 days)"
    median, p90 = hours[len(hours) // 2], hours[min(len(hours) - 1, int(0.9 * len(hours)))]
    text = f"median {median:.1f}, p90 {p90:.1f}"
    return text + (f"; {never} of {len(hours)} not demoted in 30 days" if never else f" (n={len(hours)})")


def report(reference: Reference, tallies: list[Tally], seconds: float) -> bool:
    months = seconds / MONTH
    honest = [t for t in tallies if t.profile.kind == "honest"]
    demoted = sum(t.demotions > 0 for t in honest)
    lo, hi = wilson(demoted, len(honest))
    per = len(honest) * months
    print(f"reference {reference:<10} honest: {len(honest)} endpoint-months, demoted in {demoted} "
          f"({demoted / max(1, len(honest)):.2%}, 95% CI {lo:.2%}-{hi:.2%}); per endpoint-month "
          f"{sum(t.suspects for t in honest) / per:.2f} SUSPECT episodes "
          f"({sum(t.suspect_seconds for t in honest) / (per * MONTH):.1%} of the time), "
          f"{sum(t.confirm_rounds for t in honest) / per:.1f} confirmatory rounds, "
          f"{sum(t.held for t in honest) / per:.2f} demotions held by the fleet's e-BH, "
          f"{sum(t.held_reference for t in honest) / per:.2f} held as reference-only")
    causes = sum((t.causes for t in honest), Counter())
    if causes:
        print("  honest demoting rounds by failing probe: " + ", ".join(f"{k} {v}" for k, v in causes.most_common()))
    for kind in ("own", "reference-only"):
        faulty = [t for t in tallies if t.profile.kind == kind]
        if faulty:
            print(f"  faulty ({kind}, window power {faulty[0].profile.power:g}): hours to DEMOTED "
                  f"{hours_to_demoted(faulty)}; held by e-BH {sum(t.held for t in faulty) / len(faulty):.1f} "
                  f"times each")
    return hi <= 0.01 or demoted == 0


def parse_overrides(pairs: list[str]) -> dict[str, float]:
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in HealthSettings.model_fields:
            raise SystemExit(f"unknown health setting {key!r}")
        out[key] = float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fleet", type=int, default=20, help="endpoints per fleet, sharing the e-BH gate (default 20)")
    ap.add_argument("--fleet-months", type=int, default=10, help="30-day fleet runs per reference mode (default 10)")
    ap.add_argument("--faulty-per-fleet", type=int, default=1, help="faulty endpoints of each kind per fleet")
    ap.add_argument("--power", type=float, default=0.8, help="a faulty drift window's power (default 0.8)")
    ap.add_argument("--reference", choices=(*REFERENCES, "none", "all"), default="all")
    ap.add_argument("--no-gate", action="store_true", help="without the fleet's e-BH gate")
    ap.add_argument("--quick", action="store_true", help="1 fleet-month per reference mode")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--null", choices=("uniform", "permutation"), default="permutation")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a HealthSettings override")
    args = ap.parse_args(argv)
    logging.getLogger("gateway.probes").setLevel(logging.ERROR)
    fleet_months = 1 if args.quick else args.fleet_months
    health = HealthSettings(**parse_overrides(args.set))  # type: ignore[arg-type]
    settings = ProbeSettings(health=health)
    print(f"health: suspect_e={health.suspect_e:g} demote_e={health.demote_e:g} confirm_alpha={health.confirm_alpha:g}"
          f"; drift alpha {settings.drift.alpha:g}, calibration_fpr {settings.drift.calibration_fpr:g}; fleet "
          f"{args.fleet} endpoints ({args.faulty_per_fleet} faulty of each kind), e-BH "
          f"{'off' if args.no_gate else f'at {settings.fleet.alpha:g}'}, null {args.null}")
    rng = random.Random(args.seed)
    started = time.perf_counter()
    ok = True
    for reference in REFERENCES + ("none",) if args.reference == "all" else (args.reference,):
        profiles = fleet_profiles(args.fleet, reference, args.faulty_per_fleet, args.power)
        tallies: list[Tally] = []
        for _ in range(fleet_months):
            run = asyncio.run(simulate_fleet(rng, settings, profiles, null=args.null, gate=not args.no_gate))
            tallies += run.values()
        ok &= report(reference, tallies, MONTH)
    print(f"{'PASS' if ok else 'FAIL'}: false DEMOTED <= 1% per endpoint-month (95% upper bound, or none seen) "
          f"({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
