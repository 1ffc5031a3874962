"""Pure statistics for pass rates: a Wilson interval and a one-sided Fisher exact test."""

from __future__ import annotations

import math


def wilson_interval(passes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher_less(passes: int, n: int, other_passes: int, other_n: int) -> float:
    """One-sided Fisher exact p-value that the first pass rate is lower than the second: the
    hypergeometric probability of `passes` or fewer, given the margins of the 2x2 table."""
    total, successes = n + other_n, passes + other_passes
    if n <= 0 or other_n <= 0:
        return 1.0
    denom = math.comb(total, n)
    low = max(0, successes - other_n)
    p = sum(math.comb(successes, k) * math.comb(total - successes, n - k) for k in range(low, passes + 1)) / denom
    return min(1.0, p)
