"""e-BH (Wang & Ramdas 2022): false discovery rate control over e-values.

With n hypotheses and e-values e_1..e_n, reject the k largest, where
k = max{k : e_(k) >= n / (alpha * k)} (e_(k) the k-th largest; k = 0 when none qualifies). The
FDR is at most alpha * n0 / n under any dependence among the e-values, as long as each is valid
(E[e_i] <= 1 under its null). Hypotheses without evidence count in n (as e = 0 or 1).

The bound holds for any self-consistent rejected set R, e_i >= n / (alpha * |R|) for every i in R
(Wang & Ramdas 2022, section 3); e-BH's is the largest. `self_consistent` checks a set that was
built one rejection at a time, as the fleet's gate builds its round's demotions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EBH:
    rejected: tuple[str, ...]  # largest e-value first
    k: int
    n: int
    alpha: float

    @property
    def threshold(self) -> float:
        """The e-value the k-th rejection needed (n / (alpha * k)); the single-rejection bar when k = 0."""
        return self.n / (self.alpha * max(1, self.k))


def ebh(e_values: Mapping[str, float], alpha: float, n: int | None = None) -> EBH:
    """The e-BH rejections among `e_values` at level `alpha`; `n` (at least their count) counts
    the hypotheses that have no e-value here."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    if any(e < 0 or e != e for e in e_values.values()):
        raise ValueError("e-values are non-negative numbers")
    total = max(len(e_values), n or 0)
    ranked = sorted(e_values.items(), key=lambda kv: (-kv[1], kv[0]))
    k = 0
    for i, (_, e) in enumerate(ranked, start=1):
        if e * alpha * i >= total:  # e_(i) >= n / (alpha i), without dividing
            k = i
    return EBH(tuple(name for name, _ in ranked[:k]), k, total, alpha)


def self_consistent(e_values: Mapping[str, float], alpha: float, n: int) -> bool:
    """Whether rejecting every hypothesis in `e_values` keeps FDR <= alpha among `n`: each e-value
    is at least n / (alpha * |R|). The empty set is."""
    k = len(e_values)
    return all(e * alpha * k >= max(k, n) for e in e_values.values())
