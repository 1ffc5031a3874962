"""A reference comparison calibrated on honest engines: "further from the reference than honest
engines are from each other", not "different from the reference".

Two correct engines at T=0 are deterministic and not identical, so an equality test between them
rejects at its p-value floor (issue 22). Here the margin is an order statistic of the statistic
measured on honest cross-engine pairs (probes/calibration), one value per independent pair of engine
families: its largest per-prompt statistic. With n honest values, the r-th smallest with
r = ceil((1 - fpr)(n + 1)) is exceeded by a new honest value exchangeable with them with
probability at most 1 - r/(n + 1) <= fpr (the split-conformal bound). When r > n the largest value
is the margin and the bound is 1/(n + 1): the calibration cannot support a smaller rate, and the
probe does not use it (probes.logprob_drift.calibrated).

A prompt counts against the endpoint only when its statistic exceeds the margin *and* its
permutation test rejects (the gap is not sampling noise of a stochastic endpoint); the comparison's
p-value is Bonferroni over all prompts of the permutation p-values of the prompts beyond the
margin, 1 when none is. Some prompt is beyond the margin exactly when the comparison's largest
statistic is, so under the honest null it fails with probability at most the bound
(`false_positive_rate` in the details), whatever alpha is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from probes.base import Outcome


@dataclass(frozen=True)
class Margin:
    value: float  # the honest statistic not to exceed
    bound: float  # per comparison: P(an honest value > value) <= bound
    n: int  # honest values it was taken from
    source: str  # where they came from (a calibration file)


def conformal_margin(values: Sequence[float], fpr: float, source: str = "") -> Margin:
    """The margin at nominal false-positive rate `fpr` from honest values (see the module doc)."""
    if not values:
        raise ValueError("a margin needs at least one honest value")
    if not 0 < fpr < 1:
        raise ValueError("fpr must be in (0, 1)")
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    # The tolerance keeps a product such as 0.99 * 200 from rounding up to the next rank.
    rank = min(n, math.ceil((1 - fpr) * (n + 1) - 1e-9))
    return Margin(ordered[rank - 1], (n + 1 - rank) / (n + 1), n, source)


def beyond_margin(outcome: Outcome, margin: Margin) -> Outcome:
    """`outcome` (per-prompt "statistic" and "p_value" in details["prompts"], as `drift_test`
    gives) judged against the calibrated margin instead of equality."""
    prompts = dict(outcome.details.get("prompts", {}))
    if outcome.p_value is None or not prompts:
        return outcome
    beyond = sorted(p for p, v in prompts.items() if float(v["statistic"]) > margin.value)
    p = 1.0
    if beyond:
        p = min(1.0, len(prompts) * min(float(prompts[q]["p_value"]) for q in beyond))
    details = {
        **outcome.details,
        "test": "calibrated: statistic beyond the honest margin",
        "margin": margin.value,
        "beyond_margin": beyond,
        "equality_p_value": outcome.p_value,
        "false_positive_rate": margin.bound,
        "honest_n": margin.n,
        "calibration": margin.source,
    }
    return replace(outcome, p_value=p, details=details)
