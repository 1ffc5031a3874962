"""The MET distribution test (Gao, Liang, Guestrin 2025): MMD² between two samples of completions
with a Hamming kernel, and a permutation p-value stratified by prompt.

The kernel `k(y, y') = (1/L) Σ_i 1{y_i = y'_i}` compares two completions of the same prompt
character by character after right-padding both to a common length L (pads match pads), so
k(y, y) = 1. Completions of different prompts are never compared (MET's `1{x = x'}`). Every prompt
gets the unbiased MMD² of its own completions (self-pairs left out), and the statistic is their
mean: with a fixed number of completions per prompt this is unbiased (zero under the null), where
pooling all prompts into one estimate would not be, and it orders permutations exactly as the
pooled estimate does when the prompts are balanced. Each prompt's statistic for every permutation
comes from one matrix product.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probes.base import Outcome
from probes.stats.permutation import permutation_test

_PAD = -1
# Upper bound on the booleans compared at once while building a kernel.
_CHUNK_CELLS = 20_000_000


def encode(texts: Sequence[str], max_chars: int) -> np.ndarray:
    """(n, L) code points of the texts cut to `max_chars`, right-padded with -1; L >= 1."""
    cut = [t[:max_chars] for t in texts]
    width = max(1, max((len(t) for t in cut), default=0))
    codes = np.full((len(cut), width), _PAD, dtype=np.int64)
    for i, t in enumerate(cut):
        if t:
            codes[i, : len(t)] = np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32)
    return codes


def hamming_kernel(codes: np.ndarray) -> np.ndarray:
    """The normalised Hamming kernel matrix of one prompt's encoded completions."""
    n, width = codes.shape
    kernel = np.empty((n, n))
    rows = max(1, _CHUNK_CELLS // max(1, n * width))
    for start in range(0, n, rows):
        part = codes[start : start + rows]
        kernel[start : start + rows] = (part[:, None, :] == codes[None, :, :]).sum(axis=2) / width
    return kernel


def mmd2(kernel: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Unbiased MMD² for each label row (True marks the first sample), self-pairs dropped."""
    off = kernel - np.diag(np.diag(kernel))
    first = np.asarray(labels, dtype=float)
    n = first.sum(axis=1)
    m = first.shape[1] - n
    weighted = first @ off
    within_first = np.einsum("kn,kn->k", weighted, first)
    across = weighted.sum(axis=1) - within_first
    within_second = off.sum() - 2 * across - within_first
    estimate: np.ndarray = within_first / (n * (n - 1)) + within_second / (m * (m - 1)) - 2 * across / (n * m)
    return estimate


def mmd_test(
    sample: Sequence[str],
    sample_prompts: Sequence[int],
    reference: Sequence[str],
    reference_prompts: Sequence[int],
    *,
    max_chars: int,
    permutations: int,
    rng: np.random.Generator,
) -> Outcome:
    """Mean per-prompt MMD² of `sample` against `reference` (each completion tagged with its
    prompt's index), with a permutation p-value that permutes within prompts. Prompts with fewer
    than two completions on either side are left out; `p_value` is None when none is left."""
    if len(sample) != len(sample_prompts) or len(reference) != len(reference_prompts):
        raise ValueError("every completion needs its prompt")
    strata = np.asarray([*sample_prompts, *reference_prompts])
    labels = np.arange(strata.size) < len(sample)
    codes = encode([*sample, *reference], max_chars)
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for value in np.unique(strata):
        idx = np.flatnonzero(strata == value)
        if labels[idx].sum() >= 2 and (~labels[idx]).sum() >= 2:
            blocks[int(value)] = (idx, hamming_kernel(codes[idx]))
    details: dict[str, object] = {"chars": int(codes.shape[1]), "prompts_compared": len(blocks)}
    if not blocks:
        return Outcome(statistic=0.0, samples=len(sample), reference_samples=len(reference), details=details)

    def statistic(rows: np.ndarray) -> np.ndarray:
        mean: np.ndarray = np.mean([mmd2(kernel, rows[:, idx]) for idx, kernel in blocks.values()], axis=0)
        return mean

    observed, p, _ = permutation_test(statistic, labels, permutations, rng, strata=strata)
    per_prompt = {k: float(mmd2(kernel, labels[None, idx])[0]) for k, (idx, kernel) in blocks.items()}
    return Outcome(
        statistic=observed,
        p_value=p,
        samples=len(sample),
        reference_samples=len(reference),
        details={**details, "mmd2": observed, "per_prompt": per_prompt},
    )
