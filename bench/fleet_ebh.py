"""The fleet's e-BH gate (probes.fleet) in simulation: rounds of n endpoints, some faulty, each
endpoint's audit e-value the product of its results' calibrated own-grounds p-values, as the
runner records them. Prints, per setting, the false discovery rate and the power of

- `e-BH`: e-BH over every endpoint's e-value of the round at once (what the round could reject),
- `gate`: the runner's gate, endpoints proposed one at a time in a random order, each admitted
  only when the round's demotions with it stay a set e-BH rejects (`probes.stats.ebh.self_consistent`;
  demotion j needs e >= n / (alpha j), held ones are not gated again in the round),
- `alone`: each endpoint judged by itself at e >= 1/alpha, without the fleet's control.

Honest endpoints on another engine fail reference comparisons at the p-value floor; those carry
no e-value (`result_e` gives 1), so they never count.

The probes' p-values have floors: a permutation p-value is at least 1/(B+1), and drift's golden
test is Bonferroni over its prompts. The rows marked `floors` draw p-values no smaller than the
probes' own, as the defaults set them (the first table prints them, with the largest e-value each
can give and the largest fleet in which that alone makes a round's first demotion); the rows marked
`none` let p go to 0, as fidelity's asymptotic χ² p-value can, and overstate what drift and
distribution can do.

    .venv/bin/python bench/fleet_ebh.py              # 2,000 rounds per setting
    .venv/bin/python bench/fleet_ebh.py --rounds 200
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.base import ProbeResult  # noqa: E402
from probes.distribution import confirm_permutations  # noqa: E402
from probes.fleet import audit_e  # noqa: E402
from probes.logprob_drift import drift_permutations  # noqa: E402
from probes.settings import ProbeSettings  # noqa: E402
from probes.stats.ebh import ebh, self_consistent  # noqa: E402
from probes.stats.evalues import calibrate  # noqa: E402


def floors(settings: ProbeSettings) -> dict[str, float]:
    """The smallest own-grounds p-value each probe can report, per round, at these settings."""
    prompts = len(settings.drift.prompts)

    def drift(confirm: bool, sides: int) -> float:  # the golden test: Bonferroni over prompts
        return prompts / (drift_permutations(settings, confirm=confirm, tests=prompts * sides) + 1)

    def mmd(confirm: bool) -> float:
        alpha = settings.health.confirm_alpha if confirm else settings.distribution.alpha
        return 1 / (confirm_permutations(settings.distribution.permutations, alpha, confirm) + 1)

    return {
        "drift, audit round": drift(False, 1),
        "drift, confirmatory round, with a reference": drift(True, 2),
        "drift, confirmatory round, no reference": drift(True, 1),
        "distribution, audit round (no reference)": mmd(False),
        "distribution, confirmatory round (no reference)": mmd(True),
    }


def audit(
    rng: np.random.Generator, faulty: bool, *, probe_floors: tuple[float, ...], fault_p: float
) -> list[ProbeResult]:
    """One endpoint's audit: an own-grounds result per floor (uniform p when honest, p near `fault_p`
    when faulty, never below its floor) and one reference comparison at its floor (another engine:
    every endpoint fails it)."""
    results = []
    for i, floor in enumerate(probe_floors):
        p = max(floor, float(rng.uniform() * fault_p * 2 if faulty else rng.uniform()))
        results.append(ProbeResult(f"own{i}", "fail" if p <= 0.01 else "pass", 10, p_value=p))
    results.append(
        ProbeResult("logprob_drift", "fail", 10, p_value=5e-05, grounds="reference", details={"self_p_value": None})
    )
    return results


def gate(rng: np.random.Generator, e: dict[str, float], alpha: float) -> set[str]:
    """The runner's gate over one round: proposals in a random order, each admitted only when the
    demoted set stays self-consistent."""
    demoted: dict[str, float] = {}
    for name in rng.permutation(sorted(e)):
        if self_consistent({**demoted, str(name): e[str(name)]}, alpha, len(e)):
            demoted[str(name)] = e[str(name)]
    return set(demoted)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--kappa", type=float, default=None, help="kappa * p^(kappa - 1); default: its mixture over kappa")
    ap.add_argument("--seed", type=int, default=22)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    fl = floors(ProbeSettings())
    calibrator = "the mixture over kappa" if args.kappa is None else f"kappa {args.kappa}"
    print(f"p-value floors at the default settings; e = kappa p^(kappa-1), {calibrator}")
    print(f"{'':<50} {'p floor':>9} {'e max':>7}")
    for name, p in fl.items():
        print(f"{name:<50} {p:>9.2e} {calibrate(p, args.kappa):>7.1f}")
    audit_round = (fl["drift, audit round"], fl["distribution, audit round (no reference)"])
    with_confirm = (
        *audit_round,
        fl["drift, confirmatory round, no reference"],
        fl["distribution, confirmatory round (no reference)"],
    )
    drift_only = (fl["drift, audit round"], fl["drift, confirmatory round, with a reference"])
    print()
    print(f"One on-demand audit at those floors: its largest e, and the largest fleet (FDR {args.alpha}) in which")
    print("that makes a round's first demotion (e >= n / alpha), or its fifth (e >= n / (5 alpha))")
    for name, fs in (
        ("drift + distribution, audit round only", audit_round),
        ("drift + distribution, with the confirmatory round", with_confirm),
        ("with a reference: drift only, with the confirmatory round", drift_only),
    ):
        e = float(np.prod([calibrate(p, args.kappa) for p in fs]))
        print(f"  {name:<58} e <= {e:>9.3g}   n <= {int(e * args.alpha):>7}   n <= {int(5 * e * args.alpha):>7}")
    print()
    print(f"e-BH at FDR {args.alpha}, calibrator {calibrator}, {args.rounds} rounds per row")
    print(
        f"{'n':>4} {'faulty':>6} {'probes':>6} {'floors':>7} {'fault p':>8} | {'bound':>6} |"
        f" {'e-BH: FDR':>9} {'power':>6} | {'gate: FDR':>9} {'power':>6} | {'alone: FDR':>10} {'power':>6}"
    )
    none2, none3 = (0.0, 0.0), (0.0, 0.0, 0.0)
    for n, faulty, probe_floors, label, fault_p in (
        (10, 3, none2, "none", 1e-4),
        (10, 0, none2, "none", 1e-4),
        (50, 5, none2, "none", 1e-4),
        (50, 5, none3, "none", 1e-3),
        (50, 5, none2, "none", 1e-2),
        (100, 10, none2, "none", 1e-5),
        # Drift and distribution (no reference) at their floors: one audit round, then with its
        # confirmatory round; drift alone, with a reference (distribution then carries no e-value).
        (10, 3, audit_round, "audit", 1e-4),
        (50, 5, audit_round, "audit", 1e-4),
        (50, 5, with_confirm, "+conf", 1e-4),
        (100, 10, with_confirm, "+conf", 1e-3),
        (50, 5, drift_only, "ref", 1e-4),
        (100, 10, drift_only, "ref", 1e-4),
    ):
        fdp: dict[str, list[float]] = {"ebh": [], "gate": [], "alone": []}
        power: dict[str, list[float]] = {"ebh": [], "gate": [], "alone": []}
        for _ in range(args.rounds):
            e = {
                f"ep{i}": audit_e(audit(rng, i < faulty, probe_floors=probe_floors, fault_p=fault_p), args.kappa)
                for i in range(n)
            }
            chosen = {
                "ebh": set(ebh(e, args.alpha).rejected),
                "gate": gate(rng, e, args.alpha),
                "alone": {k for k, v in e.items() if v >= 1 / args.alpha},
            }
            for how, picked in chosen.items():
                false = sum(int(k[2:]) >= faulty for k in picked)
                fdp[how].append(false / max(1, len(picked)))
                power[how].append((len(picked) - false) / faulty if faulty else 0.0)
        bound = args.alpha * (n - faulty) / n
        cells = " | ".join(
            f"{np.mean(fdp[how]):>{w}.3f} {np.mean(power[how]):>6.3f}"
            for how, w in (("ebh", 9), ("gate", 9), ("alone", 10))
        )
        print(f"{n:>4} {faulty:>6} {len(probe_floors):>6} {label:>7} {fault_p:>8.0e} | {bound:>6.3f} | {cells}")


if __name__ == "__main__":
    main()
