"""Sampling fidelity: do sampled one-token continuations follow the distribution the endpoint's
own logprobs imply at the requested temperature?

Reported logprobs are raw (before temperature and truncation, as vLLM's and llama-server's
defaults), so at temperature T the implied distribution is q_i ∝ exp(logprob_i / T). Honest
samplers often truncate the tail first (llama-server: top-k 40, min-p 0.05 unless the request turns
them off), and a third-party provider's sampler is not the gateway's to set, so a truncated tail
must pass. Top-k, min-p and top-p, applied before the temperature (llama.cpp) or after it (vLLM),
all keep a *prefix* of the tokens ranked by logprob, and conditional on a sample landing in a kept
prefix, q renormalised over it is exact whatever was cut. So the null is "q, truncated to the top m
for some m", with m at least the *head* (`head_tokens`: what no tolerated truncation, min-p up to
`min_p` and top-k down to `top_k`, can remove; a greedy sampler is a truncation to one token, and
fails when the head holds more) and at least the rank of every token sampled. Each candidate m gets
two tests of the counts in the top m against q renormalised over them, Bonferroni-combined: a χ²
(any departure; cells with small expected counts pooled) and the likelihood ratio of the
best-fitting temperature (1 dof, far more power against a changed temperature than the χ²'s ten
or so). The test's p is the largest over the candidates: valid whichever m the sampler used. A
changed temperature still changes the ratios inside every prefix, and a longer prefix (the sampled
ranks force it) keeps the power that low-probability tokens carry. What is lost is the tail's share
itself: on a flat distribution, whose temperature shows mostly in how much mass leaves the top 20,
a cooled sampler is indistinguishable from a truncating one.

The null is built from every answer's logprobs, not the first answer's: an engine's reported
logprobs of one prompt can differ between requests (llama.cpp's prefix-cache reuse: the same
prompt's first token took two values up to 0.24 nats apart, depending on the previous request;
batching does the same on other engines), so q is the *mixture* of the answers' distributions
(`Reports`), each answer's sample being drawn from its own. That is the counts' mean; their law
is then a sum of unequal multinomials, less spread than the multinomial the χ² assumes
(conservative), and each report is normalised over what it reported (exact at T = 1 and in ratio
where the unreported tails weigh alike). Its tokens are those CONSENSUS (90%) of the answers
reported (a report lacking one has it at its own smallest logprob), and the head is what that
share of the answers' own heads hold, so one odd answer neither empties the test nor moves its
head. Each request's sampler cuts its own ranking, so a sampled token forces only the prefix every
sampler must have kept (`Reports.forced`), not its rank in the mean order.

The tail beyond the head is also a reported detail, never part of the verdict: samples outside the
head are counted against the share outside it that the untruncated distribution implies (known at
T = 1 only), and a tail much lighter than that is noted as truncated. A one-sided test for a tail
*heavier* than that share (which no truncation can cause) was left out: when the head holds nearly
all the mass, its p rests on the reported logprobs' last digits, and imprecise ones would demote
honest endpoints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize, stats

from probes.base import Outcome

OTHER = "<other>"
# Below this one-sided p the tail is reported as truncated (a note, not a verdict).
TRUNCATED_P = 1e-3


def head_tokens(top: Mapping[str, float], temperature: float, *, min_p: float, top_k: int) -> list[str]:
    """The reported tokens (most likely first) that no min-p up to `min_p`, applied before the
    temperature (llama.cpp) or after it (vLLM), and no top-k of at least `top_k` can remove:
    raw probability ratio to the top token >= max(min_p, min_p ** T), and at most `top_k` tokens
    (fewer where the cut would split tied logprobs, as a top-k may break ties either way)."""
    if not top:
        raise ValueError("no logprobs")
    ranked = sorted(top, key=top.__getitem__, reverse=True)
    return ranked[: _head_length(np.array([top[t] for t in ranked]), temperature, min_p=min_p, top_k=top_k)]


def _head_length(ranked: np.ndarray, temperature: float, *, min_p: float, top_k: int) -> int:
    """`head_tokens`' length, from logprobs sorted largest first."""
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    if not 0 <= min_p < 1 or top_k < 1:
        raise ValueError("min_p must be in [0, 1) and top_k at least 1")
    floor = ranked[0] + (np.log(max(min_p, min_p**temperature)) if min_p > 0 else -np.inf)
    n = int((ranked >= floor).sum())
    if n > top_k:
        n = int((ranked[:top_k] != ranked[top_k]).sum())
    return n


def conditional_distribution(top: Mapping[str, float], temperature: float) -> dict[str, float]:
    """q over `top`'s tokens at `temperature` from raw (T = 1) logprobs, conditional on the sample
    being one of them (exact at any T, whatever lies outside)."""
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    reports = Reports.of(top)
    return dict(zip(reports.tokens, reports.conditional(len(reports.tokens), temperature).tolist(), strict=True))


Reported = Mapping[str, float] | Sequence[Mapping[str, float]]

# A token is one of the mixture's when this share of the answers reported it, and the head is what
# this share of the answers' own heads hold: one odd answer (an honest glitch, or a hostile endpoint
# corrupting a few reports) neither empties the test nor moves its head.
CONSENSUS = 0.9


@dataclass(frozen=True)
class Reports:
    """The first-token top logprobs the answers reported, as the mixture the samples were drawn
    from: one row per distinct report (`reports`), `weights` answers each. `tokens` are those at
    least CONSENSUS of the answers reported, most likely first by the reports' mean probability
    (ties in first-seen order); `logprobs[:, j]` are their raw logprobs (a report lacking one has
    it at its own smallest logprob, at least what a token below its top k has), `others` each
    report's other logprobs (padded with -inf), which normalise it at another temperature."""

    tokens: tuple[str, ...]
    logprobs: np.ndarray
    others: np.ndarray
    weights: np.ndarray
    reports: tuple[Mapping[str, float], ...]
    # Per report (row) and token of `tokens`: its rank (1 = most likely, ties share the best) and
    # log ratio to the report's top token (inf and -inf where the report lacks it); and per token
    # of any report, its best rank and largest ratio in any of them (`forced`).
    ranks: np.ndarray
    ratios: np.ndarray
    best: Mapping[str, tuple[int, float]]

    @classmethod
    def of(cls, reported: Reported) -> Reports:
        """From one report (every sample drawn from it) or each sample's own. Raises ValueError
        when there is none or no token is in CONSENSUS of them."""
        # A logprob is at most 0, and below -1e4 its probability is 0 in floats: clipped, so a
        # hostile value (1e308, -1e308) cannot overflow the tempering.
        tops = [{k: min(0.0, max(-1e4, v)) for k, v in t.items()}
                for t in ([reported] if isinstance(reported, Mapping) else reported)]
        if not tops or not all(tops):
            raise ValueError("no logprobs")
        presence = Counter(k for t in tops for k in t)
        common = {k for k, c in presence.items() if c >= CONSENSUS * len(tops)}
        if not common:
            raise ValueError(f"no token is in the top logprobs of {CONSENSUS:.0%} of the answers")
        columns = list(dict.fromkeys(k for t in tops for k in t if k in common))
        # One row per distinct report; `others` holds each row's own other tokens (as wide as the
        # longest report, not the union of every report's, which a hostile endpoint could make huge).
        distinct = Counter(tuple(sorted(t.items())) for t in tops)
        reports = tuple(dict(key) for key in distinct)
        matrix = np.array([[r.get(k, min(r.values())) for k in columns] for r in reports], dtype=float)
        width = max(sum(1 for k in r if k not in common) for r in reports)
        others = np.full((len(reports), width), -np.inf)
        for row, r in zip(others, reports, strict=True):
            rest = [v for k, v in r.items() if k not in common]
            row[: len(rest)] = rest
        weights = np.array(list(distinct.values()), dtype=float)
        order = np.argsort(-_log_mean(matrix, weights), kind="stable")
        tokens = tuple(columns[i] for i in order)
        ranks = np.full((len(reports), len(tokens)), np.inf)
        ratios = np.full((len(reports), len(tokens)), -np.inf)
        best: dict[str, tuple[int, float]] = {}
        where = {t: j for j, t in enumerate(tokens)}
        for i, r in enumerate(reports):
            values = np.array(sorted(r.values(), reverse=True))
            for k, v in r.items():
                rank, ratio = 1 + int((values > v).sum()), v - values[0]
                if k in where:
                    ranks[i, where[k]], ratios[i, where[k]] = rank, ratio
                b = best.get(k)
                best[k] = (rank, ratio) if b is None else (min(b[0], rank), max(b[1], ratio))
        return cls(tokens, matrix[:, order], others, weights, reports, ranks, ratios, best)

    @property
    def mean_logprobs(self) -> dict[str, float]:
        """Each token's log mean probability across the answers (its raw logprob with one report)."""
        return dict(zip(self.tokens, _log_mean(self.logprobs, self.weights).tolist(), strict=True))

    def log_mixture(self, temperature: float) -> np.ndarray:
        """The mixture's log probability of each of `tokens` at `temperature`, each report
        normalised over all it reported (exact in ratio when the unreported tails weigh alike)."""
        z = self.logprobs / temperature
        norm = _logsumexp(np.concatenate([z, self.others / temperature], axis=1), axis=1)
        shares = np.log(self.weights / self.weights.sum())
        return np.asarray(_logsumexp(z - norm[:, None] + shares[:, None], axis=0))

    def log_conditional(self, m: int, temperature: float) -> np.ndarray:
        """log q over the top `m` of `tokens` at `temperature`, conditional on the sample being one of them."""
        log_q = self.log_mixture(temperature)[:m]
        return np.asarray(log_q - _logsumexp(log_q))

    def conditional(self, m: int, temperature: float) -> np.ndarray:
        return np.asarray(np.exp(self.log_conditional(m, temperature)))

    def head(self, temperature: float, *, min_p: float, top_k: int) -> list[str]:
        """The longest prefix of `tokens` inside the own head (`head_tokens`: what no tolerated
        truncation removes; each request's sampler cuts its own distribution) of at least
        CONSENSUS of the answers."""
        held = []
        for r in self.reports:
            own = set(head_tokens(r, temperature, min_p=min_p, top_k=top_k))
            held.append(next((j for j, t in enumerate(self.tokens) if t not in own), len(self.tokens)))
        return list(self.tokens[: _held_by_consensus(np.array(held), self.weights)])

    def forced(self, token: str) -> int | None:
        """How many of `tokens` (a prefix) every sampler kept, given that one drew `token`; None
        when no report has it. The answer that drew it is not known, and each request's sampler
        cuts its own ranking, so this is what the weakest proof allows: a top-k kept at least the
        token's best rank in any report, a min-p a raw ratio to the top at least its largest one;
        the prefix is the longest that CONSENSUS of the reports keep under both (ranks and ratios
        differ per report: a token the mean ranking puts 11th may be 10th in the answer that drew it)."""
        if token not in self.best:
            return None
        best_rank, best_ratio = self.best[token]
        kept = (self.ranks <= best_rank) & (self.ratios >= best_ratio)
        # Per report, how many of `tokens` (in order) it keeps before the first it cuts.
        kept = np.where(kept.all(axis=1), kept.shape[1], np.argmin(kept, axis=1))
        return _held_by_consensus(kept, self.weights)

    def head_share(self, head: int) -> float:
        """The mean raw probability (T = 1) of the top `head` tokens."""
        return float(self.weights @ np.exp(self.logprobs[:, :head]).sum(axis=1) / self.weights.sum())


def _held_by_consensus(lengths: np.ndarray, weights: np.ndarray) -> int:
    """The largest n such that reports of at least CONSENSUS of the weight have length >= n."""
    order = np.argsort(-lengths, kind="stable")
    share = np.cumsum(weights[order]) / weights.sum()
    return int(lengths[order][int(np.searchsorted(share, CONSENSUS - 1e-12))])


def _logsumexp(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    """log Σ exp(a) along `axis`, for rows with at least one finite entry (scipy's, with its array
    API checks, made the test ten times slower: it runs in every likelihood evaluation)."""
    top = np.max(a, axis=axis, keepdims=True)
    return np.asarray(np.squeeze(top, axis=axis) + np.log(np.exp(a - top).sum(axis=axis)))


def _log_mean(logprobs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each column's log of the weighted mean of its probabilities."""
    return np.asarray(_logsumexp(logprobs + np.log(weights / weights.sum())[:, None], axis=0))


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
    counts: Mapping[str, int], reported: Reported, temperature: float, *, min_p: float = 0.1,
    top_k: int = 10, min_expected: float = 5.0,
) -> Outcome:
    """Is there a tolerated truncation under which the counts follow q, the mixture of the
    `reported` logprobs (one report for every sample, or each sample's own: `Reports`)? Top-k,
    min-p and top-p, before or after the temperature, each keep a prefix of the tokens ranked by
    logprob, so an honest sampler keeps the top m for some m no smaller than the head
    (`Reports.head` with `min_p`, `top_k`) and no smaller than what every sampler kept given the
    tokens sampled (`Reports.forced`; all of the reported ones when a token no report has was
    sampled: the top-k conditional test then covers every longer prefix). Each such m gets
    `_prefix_test` of the counts in the top m against q renormalised over them; `p_value` is the
    largest (valid whichever m the sampler used), None when some m leaves fewer than two cells
    after pooling, or when no token is in CONSENSUS of the reports. `samples` counts the samples in
    the chosen prefix (`kept`)."""
    total = sum(int(c) for c in counts.values())
    if total <= 0:
        raise ValueError("no samples")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    try:
        reports = Reports.of(reported)
    except ValueError as exc:
        return Outcome(statistic=0.0, samples=0, details={"reason": str(exc)})
    ranked = list(reports.tokens)
    head = reports.head(temperature, min_p=min_p, top_k=top_k)
    outside = sum(int(c) for k, c in counts.items() if k not in reports.tokens)
    # A sampled token forces the prefix every sampler must have kept (`Reports.forced`); one no
    # report has (drawn below every top k), every prefix.
    forced = [reports.forced(k) for k, c in counts.items() if c > 0]
    lo = len(ranked) if None in forced else max([len(head), *(f for f in forced if f is not None)])
    mean = reports.mean_logprobs
    # A cut between tied logprobs is no prefix a sampler must keep (ties break either way).
    cuts = [m for m in range(lo, len(ranked) + 1) if m == len(ranked) or mean[ranked[m - 1]] != mean[ranked[m]]]
    tests = [_prefix_test(counts, reports, m, temperature, min_expected) for m in cuts]
    kept, chosen = max(zip(cuts, tests, strict=True), key=lambda t: 2.0 if t[1].p_value is None else t[1].p_value)
    n_head = sum(int(counts.get(k, 0)) for k in head)
    details: dict[str, object] = {
        "temperature": temperature,
        "temperature_estimate": _estimate(counts, reports, lo),
        "head": len(head),
        "prefixes": [lo, len(ranked)],
        "kept": kept,
        "outside_top_k": outside,
        "reports": len(reports.weights),
        **_tail(total, total - n_head, reports.head_share(len(head)), temperature),
        **chosen.details,
    }
    return replace(chosen, details=details)


def _prefix_test(
    counts: Mapping[str, int], reports: Reports, m: int, temperature: float, min_expected: float
) -> Outcome:
    """The counts of the top `m` tokens against q renormalised over them: the χ² (any departure)
    and the likelihood ratio of the best-fitting temperature (1 dof: the fault this probe is for),
    Bonferroni-combined."""
    prefix = reports.tokens[:m]
    observed = {k: int(counts.get(k, 0)) for k in prefix}
    n = sum(observed.values())
    if n == 0:
        return Outcome(statistic=0.0)
    q = reports.conditional(m, temperature)
    labels, obs, exp = pooled_cells(observed, {k: n * float(v) for k, v in zip(prefix, q, strict=True)}, min_expected)
    cells = [
        {"token": k, "observed": int(o), "expected": round(float(e), 2)}
        for k, o, e in zip(labels, obs, exp, strict=True)
    ]
    if len(labels) < 2:
        return Outcome(statistic=0.0, samples=n, details={"cells": cells})
    dof = len(labels) - 1
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    p_values = [float(stats.chi2.sf(chi2, dof))]
    details: dict[str, object] = {"cells": cells, "dof": dof, "chi2_p": p_values[0]}
    fitted = _fit_temperature(observed, reports, m)
    if fitted is not None:
        nll, best = fitted
        p_values.append(float(stats.chi2.sf(max(0.0, 2 * (nll(temperature) - nll(best))), 1)))
        details["temperature_p"] = p_values[1]
    return Outcome(statistic=chi2, p_value=min(1.0, len(p_values) * min(p_values)), samples=n, details=details)


def _tail(total: int, outside: int, head_share: float, temperature: float) -> dict[str, object]:
    """Samples outside the head, the count the untruncated distribution implies (at T = 1; None
    elsewhere), and whether so few are seen that the tail looks truncated."""
    if abs(temperature - 1.0) > 1e-9:
        return {"outside_head": {"observed": outside, "expected": None}}
    share = min(1.0, max(0.0, 1.0 - head_share))
    return {
        "outside_head": {"observed": outside, "expected": round(total * share, 2)},
        "tail_truncated": bool(stats.binom.cdf(outside, total, share) <= TRUNCATED_P),
    }


def estimate_temperature(counts: Mapping[str, int], reported: Reported) -> float | None:
    """The temperature that best explains the counts of the reported tokens (maximum likelihood
    over [0.05, 5], conditional on them, so exact for any T); None with under two such tokens seen."""
    reports = Reports.of(reported)
    return _estimate(counts, reports, len(reports.tokens))


def _estimate(counts: Mapping[str, int], reports: Reports, m: int) -> float | None:
    fitted = _fit_temperature(counts, reports, m)
    return None if fitted is None else round(fitted[1], 3)


def _fit_temperature(
    counts: Mapping[str, int], reports: Reports, m: int
) -> tuple[Callable[[float], float], float] | None:
    """The negative log-likelihood of a temperature given the counts of the top `m` tokens
    (conditional on them), and its minimiser over [0.05, 5]; None with under two tokens seen."""
    prefix = reports.tokens[:m]
    if sum(1 for k in prefix if counts.get(k, 0)) < 2:
        return None
    c = np.array([counts.get(k, 0) for k in prefix], dtype=float)

    def nll(t: float) -> float:
        return float(-(c * reports.log_conditional(m, t)).sum())

    return nll, float(optimize.minimize_scalar(nll, bounds=(0.05, 5.0), method="bounded").x)
