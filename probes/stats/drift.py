"""Logprob drift (LT, Chauvin et al. 2025): does a window of one-token top-k logprobs differ from
another window of the same prompts?

Per prompt, every response becomes a row of logprobs over the union of tokens seen in either window;
a token missing from a response's top-k is imputed with that response's smallest logprob (an upper
bound on its true value). The statistic is `S = mean_i |ā_i^(1) − ā_i^(2)|` over tokens i, its
p-value comes from permuting responses between the windows, and prompts are combined by Bonferroni.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from probes.base import Outcome
from probes.stats.permutation import permutation_test

TopLogprobs = Mapping[str, float]


def logprob_matrix(responses: Sequence[TopLogprobs], tokens: Sequence[str]) -> np.ndarray:
    """Rows of logprobs over `tokens`, each missing token imputed with its row's minimum."""
    rows = np.empty((len(responses), len(tokens)))
    for r, top in enumerate(responses):
        floor = min(top.values())
        rows[r] = [top.get(t, floor) for t in tokens]
    return rows


def lt_statistic(rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """S for each label row (True marks the first window): mean absolute gap of per-token means."""
    first = np.asarray(labels, dtype=float)
    second = 1.0 - first
    gap = first @ rows / first.sum(axis=1, keepdims=True) - second @ rows / second.sum(axis=1, keepdims=True)
    mean_gap: np.ndarray = np.abs(gap).mean(axis=1)
    return mean_gap


def prompt_test(
    current: Sequence[TopLogprobs], baseline: Sequence[TopLogprobs], *, permutations: int, rng: np.random.Generator
) -> tuple[float, float]:
    """(S, permutation p) for one prompt's two windows."""
    current = [r for r in current if r]
    baseline = [r for r in baseline if r]
    if not current or not baseline:
        raise ValueError("each window needs at least one response with logprobs")
    tokens = sorted({t for r in (*current, *baseline) for t in r})
    rows = logprob_matrix([*current, *baseline], tokens)
    labels = np.arange(rows.shape[0]) < len(current)
    observed, p, _ = permutation_test(lambda lab: lt_statistic(rows, lab), labels, permutations, rng)
    return observed, p


def drift_test(
    current: Mapping[str, Sequence[TopLogprobs]],
    baseline: Mapping[str, Sequence[TopLogprobs]],
    *,
    permutations: int,
    rng: np.random.Generator,
) -> Outcome:
    """Per-prompt LT tests on the prompts both windows have, Bonferroni-combined.

    `statistic` is the largest per-prompt S; `p_value` is None when no prompt can be compared.
    """
    per_prompt: dict[str, dict[str, float | int]] = {}
    for prompt, responses in current.items():
        reference = [r for r in baseline.get(prompt, ()) if r]
        responses = [r for r in responses if r]
        if not reference or not responses:
            continue
        s, p = prompt_test(responses, reference, permutations=permutations, rng=rng)
        per_prompt[prompt] = {"statistic": s, "p_value": p, "samples": len(responses), "baseline": len(reference)}
    if not per_prompt:
        return Outcome(statistic=0.0, details={"prompts": {}})
    p_min = min(float(v["p_value"]) for v in per_prompt.values())
    return Outcome(
        statistic=max(float(v["statistic"]) for v in per_prompt.values()),
        p_value=min(1.0, p_min * len(per_prompt)),
        samples=sum(int(v["samples"]) for v in per_prompt.values()),
        reference_samples=sum(int(v["baseline"]) for v in per_prompt.values()),
        details={"prompts": per_prompt},
    )
