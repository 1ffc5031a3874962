"""Endpoint-months of the health policy: how often an honest endpoint is demoted, how fast a faulty one is.

Runs the real `probes.policy.decide` on the real evidence state with an injected clock, on the
scheduler's timetable (`ProbeSettings.intervals`, jitter, the demoted slowdown), one probe per
scheduled round, and the confirmatory round right after any decision that asks for one, with the
probes the runner would run (`ProbeRegistry.confirmatory`). Probes are replaced by p-value models:

- honest: null p-values, either uniform (`--null uniform`) or permutation p-values (1+#)/(B+1)
  Bonferroni-combined over the probe's tests as the probes combine them (`--null permutation`);
- faulty: the drift window rejects at its alpha (0.05) with probability `power`; its p-value is
  that of a one-sided z-test with the matching shift, so the confirmatory re-run at the stricter
  confirm_alpha has less power than the window (floored at the permutation floor).

    .venv/bin/python bench/health_sim.py                  # 2,000 honest endpoint-months
    .venv/bin/python bench/health_sim.py --quick          # 200
    .venv/bin/python bench/health_sim.py --set suspect_e=20 --set confirm_alpha=0.01   # other thresholds
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernel.health import EndpointHealth  # noqa: E402
from probes.base import Effect, ProbeResult, verdict_from_p  # noqa: E402
from probes.distribution import confirm_permutations  # noqa: E402
from probes.evidence import EvidenceState  # noqa: E402
from probes.logprob_drift import drift_permutations  # noqa: E402
from probes.policy import decide  # noqa: E402
from probes.registry import ProbeRegistry  # noqa: E402
from probes.settings import HealthSettings, ProbeSettings  # noqa: E402
from probes.stats.evalues import window_e  # noqa: E402

MONTH = 30 * 86_400.0
Z = NormalDist()


@dataclass(frozen=True)
class ProbeModel:
    """A probe as the policy sees it: effect, alphas, and how many permutation tests it combines."""

    name: str
    effect: Effect
    alpha: float
    confirm_alpha: float
    tests: int = 1  # Bonferroni-combined tests (prompts x comparisons)
    permutations: int | None = None  # None: a continuous (or conservative discrete) p-value
    confirm_permutations: int | None = None
    gives_e: bool = True  # the probe reports its own window e-value


def probe_models(s: ProbeSettings) -> dict[str, ProbeModel]:
    h = s.health
    drift_tests = len(s.drift.prompts) * 2  # golden and a reference engine
    return {
        "logprob_drift": ProbeModel("logprob_drift", "evidence", s.drift.alpha, h.confirm_alpha, drift_tests,
                                    drift_permutations(s, confirm=False, tests=drift_tests),
                                    drift_permutations(s, confirm=True, tests=drift_tests)),
        "distribution": ProbeModel("distribution", "confirm", s.distribution.alpha, h.confirm_alpha, 1,
                                   s.distribution.permutations,
                                   confirm_permutations(s.distribution.permutations, h.confirm_alpha, True)),
        "fidelity": ProbeModel("fidelity", "evidence", s.fidelity.alpha, h.confirm_alpha),
        # In a confirmatory round every probe judges at the stricter of its alpha and confirm_alpha.
        "toolcalls": ProbeModel("toolcalls", "confirm", s.toolcalls.alpha, min(s.toolcalls.alpha, h.confirm_alpha),
                                gives_e=False),
        "sentinels": ProbeModel("sentinels", "suspect", s.sentinels.loops.alpha,
                                min(s.sentinels.loops.alpha, h.confirm_alpha), gives_e=False),
        "agent": ProbeModel("agent", "evidence", s.agent.alpha, min(s.agent.alpha, h.confirm_alpha), gives_e=False),
    }


PValue = Callable[[random.Random, ProbeModel, bool], float]


def null_p(kind: str) -> PValue:
    def uniform(rng: random.Random, m: ProbeModel, confirm: bool) -> float:
        return rng.random()

    def permutation(rng: random.Random, m: ProbeModel, confirm: bool) -> float:
        b = m.confirm_permutations if confirm else m.permutations
        if b is None:
            return rng.random()
        smallest = min(rng.randint(0, b) for _ in range(m.tests))  # permuted statistics >= the observed one
        return min(1.0, m.tests * (1 + smallest) / (b + 1))

    return {"uniform": uniform, "permutation": permutation}[kind]


def faulty_drift_p(power: float, null: PValue, window_alpha: float) -> PValue:
    """Drift p-values of a fault the window test catches with probability `power`; others stay null."""
    shift = Z.inv_cdf(1 - window_alpha) + Z.inv_cdf(power)

    def p(rng: random.Random, m: ProbeModel, confirm: bool) -> float:
        if m.name != "logprob_drift":
            return null(rng, m, confirm)
        value = 1.0 - Z.cdf(rng.gauss(0.0, 1.0) + shift)
        b = m.confirm_permutations if confirm else m.permutations
        return max(value, m.tests / (b + 1)) if b is not None else value

    return p


def result(rng: random.Random, m: ProbeModel, p_of: PValue, confirm: bool, health: HealthSettings) -> ProbeResult:
    p = p_of(rng, m, confirm)
    alpha = m.confirm_alpha if confirm else m.alpha
    e = window_e(p, alpha, health) if m.gives_e else None
    return ProbeResult(m.name, verdict_from_p(p, alpha), 10, p_value=p, e_value=e, effect=m.effect)


@dataclass
class Month:
    demotions: int = 0
    suspects: int = 0
    confirm_rounds: int = 0
    first_demoted: float | None = None  # seconds from the start
    causes: Counter[str] = field(default_factory=Counter)  # the probes failing in each demoting round


def simulate(rng: random.Random, settings: ProbeSettings, p_of: PValue, *, seconds: float = MONTH,
             stop_at_demotion: bool = False) -> Month:
    """One endpoint over `seconds`, driven by an injected clock (no wall time is read)."""
    models = probe_models(settings)
    registry = ProbeRegistry()
    health_settings = settings.health
    now = 1_700_000_000.0
    start = now
    health, evidence = EndpointHealth(since=now), EvidenceState()
    due = {p: now + rng.uniform(0, iv) for p, iv in settings.intervals.items() if p in models}
    out = Month()
    while True:
        probe = min(due, key=due.__getitem__)
        now = due[probe]
        if now - start >= seconds:
            return out
        names, confirm = [probe], False
        while True:
            results = [result(rng, models[n], p_of, confirm, health_settings) for n in names]
            d = decide(health, evidence, results, confirm=confirm, now=now, settings=health_settings)
            evidence = d.evidence
            out.confirm_rounds += confirm
            if d.to_state is not None:
                health = EndpointHealth(d.to_state, since=now)
                out.suspects += d.to_state == "suspect"
                if d.to_state == "demoted":
                    out.demotions += 1
                    out.causes[",".join(r.probe for r in results if r.verdict == "fail") or "e-CUSUM"] += 1
                    if out.first_demoted is None:
                        out.first_demoted = now - start
                        if stop_at_demotion:
                            return out
            if confirm or not d.confirm:
                break
            names, confirm = registry.confirmatory(d.confirm_for), True
        interval = settings.intervals[probe] * (settings.demoted_slowdown if health.state == "demoted" else 1.0)
        due[probe] = now + interval * (1.0 + rng.uniform(-settings.jitter, settings.jitter))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson interval of a binomial proportion."""
    if n == 0:
        return 0.0, 1.0
    phat = k / n
    centre = (phat + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def honest_report(rng: random.Random, settings: ProbeSettings, null: str, months: int) -> bool:
    runs = [simulate(rng, settings, null_p(null)) for _ in range(months)]
    demoted = sum(m.demotions > 0 for m in runs)
    lo, hi = wilson(demoted, months)
    suspects = statistics.fmean(m.suspects for m in runs)
    confirms = statistics.fmean(m.confirm_rounds for m in runs)
    print(f"honest, null={null:<11} {months} endpoint-months: demoted in {demoted} "
          f"({demoted / months:.2%}, 95% CI {lo:.2%}-{hi:.2%}); "
          f"{sum(m.demotions for m in runs) / months:.3f} demotions, {suspects:.2f} SUSPECT episodes and "
          f"{confirms:.2f} confirmatory rounds per endpoint-month")
    causes = sum((m.causes for m in runs), Counter())
    if causes:
        print("  demoting rounds by failing probe: " + ", ".join(f"{k} {v}" for k, v in causes.most_common()))
    return hi <= 0.01 or demoted == 0


def faulty_report(rng: random.Random, settings: ProbeSettings, null: str, power: float, n: int) -> float:
    p_of = faulty_drift_p(power, null_p(null), settings.drift.alpha)
    hours = [m.first_demoted / 3600 if m.first_demoted is not None else math.inf
             for m in (simulate(rng, settings, p_of, stop_at_demotion=True) for _ in range(n))]
    hours.sort()
    median, p90 = hours[len(hours) // 2], hours[min(len(hours) - 1, int(0.9 * len(hours)))]
    never = sum(math.isinf(h) for h in hours)
    print(f"faulty, window power {power:.2f}, null={null:<11} {n} endpoints: hours to DEMOTED median "
          f"{median:.1f}, p90 {p90:.1f}" + (f", {never} not demoted in 30 days" if never else ""))
    return median


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
    ap.add_argument("--months", type=int, default=2000, help="honest endpoint-months (default 2000)")
    ap.add_argument("--faulty", type=int, default=400, help="faulty endpoints per power (default 400)")
    ap.add_argument("--quick", action="store_true", help="200 endpoint-months, 100 faulty endpoints per power")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--null", choices=("uniform", "permutation", "both"), default="both")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a HealthSettings override")
    args = ap.parse_args(argv)
    months, faulty = (200, 100) if args.quick else (args.months, args.faulty)
    health = HealthSettings(**parse_overrides(args.set))  # type: ignore[arg-type]
    settings = ProbeSettings(health=health)
    print(f"health settings: suspect_e={health.suspect_e:g} demote_e={health.demote_e:g} "
          f"confirm_alpha={health.confirm_alpha:g} window e={health.window_e_low:g}+{health.window_e_high:g}"
          f"*1{{p<={settings.drift.alpha:g}}}; drift permutations {probe_models(settings)['logprob_drift'].permutations}"
          f" (confirmatory {probe_models(settings)['logprob_drift'].confirm_permutations})")
    rng = random.Random(args.seed)
    started = time.perf_counter()
    ok = True
    for null in ("uniform", "permutation") if args.null == "both" else (args.null,):
        ok &= honest_report(rng, settings, null, months)
        for power in (0.5, 0.8, 0.95):
            median = faulty_report(rng, settings, null, power, faulty)
            if power == 0.8:
                ok &= median <= 24
    verdict = "PASS" if ok else "FAIL"
    print(f"{verdict}: false DEMOTED <= 1% per endpoint-month (95% upper bound, or none seen) and a window "
          f"power of 0.8 demoted within a day (median) ({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
