"""The fleet's e-BH gate (probes.fleet) in simulation: rounds of n endpoints, some faulty, each
endpoint's audit e-value the product of its results' calibrated own-grounds p-values, as the
runner records them. Prints the false discovery rate and the power per setting, and what the
same audits would demote without the gate (each endpoint judged alone at the bar e >= 1/alpha).

Honest endpoints on another engine fail reference comparisons at the p-value floor; those carry
no e-value (`result_e` gives 1), so they never count: `--reference-floor` shows that.

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
from probes.fleet import audit_e  # noqa: E402
from probes.stats.ebh import ebh  # noqa: E402


def audit(rng: np.random.Generator, faulty: bool, *, probes: int, fault_p: float) -> list[ProbeResult]:
    """One endpoint's audit: `probes` own-grounds results (uniform p when honest, p near `fault_p`
    when faulty) and one reference comparison at its floor (another engine: every endpoint fails it)."""
    results = []
    for i in range(probes):
        p = float(rng.uniform() * fault_p * 2 if faulty else rng.uniform())
        results.append(ProbeResult(f"own{i}", "fail" if p <= 0.01 else "pass", 10, p_value=p))
    results.append(
        ProbeResult("logprob_drift", "fail", 10, p_value=5e-05, grounds="reference", details={"self_p_value": None})
    )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--kappa", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=22)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"e-BH at FDR {args.alpha}, calibrator kappa {args.kappa}, {args.rounds} rounds per row")
    print(
        f"{'n':>4} {'faulty':>6} {'probes':>6} {'fault p':>8} | {'FDR':>6} {'bound':>6} {'power':>6} |"
        f" {'alone: FDR':>10} {'power':>6}"
    )
    for n, faulty, probes, fault_p in (
        (10, 3, 2, 1e-4),
        (10, 0, 2, 1e-4),
        (50, 5, 2, 1e-4),
        (50, 5, 3, 1e-3),
        (50, 5, 2, 1e-2),
        (100, 10, 2, 1e-5),
    ):
        fdp, power, fdp_alone, power_alone = [], [], [], []
        for _ in range(args.rounds):
            e = {
                f"ep{i}": audit_e(audit(rng, i < faulty, probes=probes, fault_p=fault_p), args.kappa) for i in range(n)
            }
            for chosen, fd, pw in (
                (set(ebh(e, args.alpha).rejected), fdp, power),
                ({k for k, v in e.items() if v >= 1 / args.alpha}, fdp_alone, power_alone),
            ):
                false = sum(int(k[2:]) >= faulty for k in chosen)
                fd.append(false / max(1, len(chosen)))
                pw.append((len(chosen) - false) / faulty if faulty else 0.0)
        bound = args.alpha * (n - faulty) / n
        print(
            f"{n:>4} {faulty:>6} {probes:>6} {fault_p:>8.0e} | {np.mean(fdp):>6.3f} {bound:>6.3f} {np.mean(power):>6.3f} |"
            f" {np.mean(fdp_alone):>10.3f} {np.mean(power_alone):>6.3f}"
        )


if __name__ == "__main__":
    main()
