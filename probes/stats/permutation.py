"""Permutation p-values: `(1 + #{T_b >= T}) / (B + 1)`, exact-valid for any B.

Labels are permuted as a whole or, with strata, only within each stratum (the MET test permutes
within prompts, so each prompt keeps its share of both samples).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Statistics recomputed on the observed split may differ from it in the last bits; a permuted
# statistic this close (relative) to the observed one counts as a tie, which keeps the p-value valid.
_TIE = 1e-9
# Permuted label rows drawn and evaluated at once (a bound on memory at any permutation count).
CHUNK = 20_000


def p_value(observed: float, null: np.ndarray) -> float:
    """The permutation p-value of `observed` against the permuted statistics `null`."""
    null = np.asarray(null, dtype=float)
    tol = _TIE * max(1.0, abs(observed))
    return float((1 + np.count_nonzero(null >= observed - tol)) / (null.size + 1))


def permuted_labels(
    labels: np.ndarray, permutations: int, rng: np.random.Generator, *, strata: np.ndarray | None = None
) -> np.ndarray:
    """`permutations` rows, each a permutation of `labels` (within each stratum when given)."""
    labels = np.asarray(labels)
    n = labels.size
    if strata is None:
        order = rng.permuted(np.broadcast_to(np.arange(n), (permutations, n)), axis=1)
        permuted: np.ndarray = labels[order]
        return permuted
    strata = np.asarray(strata)
    if strata.shape != labels.shape:
        raise ValueError("strata and labels must have the same shape")
    out = np.empty((permutations, n), dtype=labels.dtype)
    for value in np.unique(strata):
        idx = np.flatnonzero(strata == value)
        order = rng.permuted(np.broadcast_to(np.arange(idx.size), (permutations, idx.size)), axis=1)
        out[:, idx] = labels[idx][order]
    return out


def permutation_test(
    statistic: Callable[[np.ndarray], np.ndarray],
    labels: np.ndarray,
    permutations: int,
    rng: np.random.Generator,
    *,
    strata: np.ndarray | None = None,
) -> tuple[float, float, np.ndarray]:
    """(observed, p, null) for a vectorised `statistic`: (k, n) label rows -> k values."""
    if permutations < 1:
        raise ValueError("permutations must be at least 1")
    labels = np.asarray(labels)
    observed = float(statistic(labels[None, :])[0])
    # In chunks: a confirmatory round's permutations are 200/alpha, unbounded by alpha's setting.
    null = np.concatenate([
        np.asarray(statistic(permuted_labels(labels, min(CHUNK, permutations - done), rng, strata=strata)), dtype=float)
        for done in range(0, permutations, CHUNK)
    ])
    return observed, p_value(observed, null), null
