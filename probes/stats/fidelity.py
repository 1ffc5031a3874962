"""Sampling fidelity: do sampled one-token continuations follow the distribution the endpoint's
own logprobs imply at the requested temperature?

Reported logprobs are raw (before temperature, as vLLM's default), so at temperature T the implied
distribution over the top-k is q_i ∝ exp(logprob_i / T). At T = 1 the rest of the mass is known
(1 − Σ exp(logprob_i)) and gets an "other" cell. At any other T the rest's share depends on logprobs
nobody reported, so the test conditions on the sample landing in the top-k, where q is exact; samples
outside it are reported but not tested. A χ² test compares the counts with q after pooling cells
whose expected count is small.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import optimize, stats

from probes.base import Outcome

OTHER = "<other>"


def implied_distribution(top: Mapping[str, float], temperature: float) -> dict[str, float]:
    """q over the top-k tokens at `temperature` from raw (T = 1) logprobs; at T = 1 with OTHER,
    elsewhere conditional on the top-k (no OTHER key)."""
    if not top:
        raise ValueError("no logprobs")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    logprobs = np.array(list(top.values()), dtype=float)
    if _is_one(temperature):
        probs = np.exp(logprobs)
        q = dict(zip(top, probs.tolist(), strict=True))
        q[OTHER] = max(0.0, 1.0 - float(probs.sum()))
        total = sum(q.values())
        return {k: v / total for k, v in q.items()}
    z = logprobs / temperature
    weights = np.exp(z - z.max())
    return dict(zip(top, (weights / weights.sum()).tolist(), strict=True))


def pooled_cells(
    observed: Mapping[str, int], expected: Mapping[str, float], min_expected: float
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Cells with expected count >= `min_expected`, the rest pooled into OTHER (itself merged into
    the smallest cell while still too small). Returns (labels, observed, expected)."""
    big = {k: e for k, e in expected.items() if k != OTHER and e >= min_expected}
    pooled_e = sum(e for k, e in expected.items() if k not in big)
    pooled_o = sum(o for k, o in observed.items() if k not in big)
    while big and 0 < pooled_e < min_expected:
        smallest = min(big, key=big.__getitem__)
        pooled_e += big.pop(smallest)
        pooled_o += observed.get(smallest, 0)
    labels = list(big)
    obs = [observed.get(k, 0) for k in labels]
    exp = list(big.values())
    if pooled_e > 0 or pooled_o > 0:
        labels.append(OTHER)
        obs.append(pooled_o)
        exp.append(pooled_e)
    return labels, np.array(obs, dtype=float), np.array(exp, dtype=float)


def fidelity_test(
    counts: Mapping[str, int], top: Mapping[str, float], temperature: float, *, min_expected: float = 5.0
) -> Outcome:
    """χ² of sampled token counts against q at `temperature`. `p_value` is None when pooling leaves
    fewer than two cells; `samples` counts the tested samples."""
    if sum(counts.values()) <= 0:
        raise ValueError("no samples")
    observed = {k: 0 for k in top}
    outside = 0
    for token, c in counts.items():
        if token in top:
            observed[token] += int(c)
        else:
            outside += int(c)
    q = implied_distribution(top, temperature)
    if OTHER in q:
        observed[OTHER] = outside
    n = sum(observed.values())
    details: dict[str, object] = {
        "temperature": temperature,
        "temperature_estimate": estimate_temperature(counts, top),
        "outside_top_k": outside,
    }
    if n == 0:
        return Outcome(statistic=0.0, samples=0, details=details)
    labels, obs, exp = pooled_cells(observed, {k: n * v for k, v in q.items()}, min_expected)
    details["cells"] = [
        {"token": k, "observed": int(o), "expected": round(float(e), 2)}
        for k, o, e in zip(labels, obs, exp, strict=True)
    ]
    if len(labels) < 2:
        return Outcome(statistic=0.0, samples=n, details=details)
    dof = len(labels) - 1
    if np.any(exp <= 0):  # a sample where the logprobs leave no mass
        return Outcome(statistic=float("inf"), p_value=0.0, samples=n, details={**details, "dof": dof})
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    return Outcome(statistic=chi2, p_value=float(stats.chi2.sf(chi2, dof)), samples=n, details={**details, "dof": dof})


def estimate_temperature(counts: Mapping[str, int], top: Mapping[str, float]) -> float | None:
    """The temperature that best explains the counts of top-k tokens (maximum likelihood over
    [0.05, 5], conditional on the top-k, so exact for any T); None with under two such tokens seen."""
    seen = {k: c for k, c in counts.items() if k in top and c}
    if len(seen) < 2:
        return None
    tokens = list(top)
    logprobs = np.array([top[k] for k in tokens])
    c = np.array([seen.get(k, 0) for k in tokens], dtype=float)

    def nll(t: float) -> float:
        z = logprobs / t
        log_q = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        return float(-(c * log_q).sum())

    return round(float(optimize.minimize_scalar(nll, bounds=(0.05, 5.0), method="bounded").x), 3)


def _is_one(temperature: float) -> bool:
    return abs(temperature - 1.0) < 1e-9
