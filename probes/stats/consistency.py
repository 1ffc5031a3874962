"""Usage consistency: one endpoint, the same prompt, different reported `prompt_tokens`.

Tokenizing and templating a prompt is deterministic on every engine, so an honest endpoint reports
one `prompt_tokens` for identical messages however often they are sent, whatever its kernels or
batch sizes. A provider that serves a share of requests with another model (another tokenizer or
chat template) reports that model's counts for them. This is a test on the endpoint's own grounds:
no reference is needed, and another correct engine does not fail it.

The null tolerates operational noise: each request may report something other than its prompt's
usual count with probability at most `tolerated_share`, independently. With n answers to prompts
sent at least twice and k of them off their prompt's most common value (a count, or none), k is
stochastically below Binomial(n, tolerated_share) under that null (the usual count matches at most
as many answers as the most common value does), so P(Binomial(n, tolerated_share) >= k) is a valid, conservative p-value.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from probes.base import Outcome


def usage_consistency(records: Iterable[tuple[str, int | None]], tolerated_share: float) -> Outcome | None:
    """`records`: (prompt fingerprint, reported prompt_tokens or None when the answer reported
    none) per answered request. An answer without a count to a prompt that other answers counted
    is off too (leaving usage out of the substituted answers would hide them). None when no prompt
    was answered twice with a count among its answers (nothing to compare)."""
    from scipy import stats  # imported here: the client that records counts is on the gateway's import path

    by_prompt: dict[str, Counter[int | None]] = defaultdict(Counter)
    for fingerprint, tokens in records:
        by_prompt[fingerprint][tokens] += 1
    repeated = {fp: counts for fp, counts in by_prompt.items()
                if counts.total() >= 2 and any(t is not None for t in counts)}
    if not repeated:
        return None
    n = sum(counts.total() for counts in repeated.values())
    # The most common value, no count included: an answer is off when it differs from its prompt's.
    off = sum(counts.total() - max(counts.values()) for counts in repeated.values())
    p = float(stats.binom.sf(off - 1, n, tolerated_share)) if off else 1.0
    mixed = {fp: {str(t): c for t, c in sorted(counts.items(), key=lambda tc: (tc[0] is None, tc[0] or 0))}
             for fp, counts in repeated.items() if len(counts) > 1}
    return Outcome(
        statistic=off / n, p_value=p, samples=n,
        details={"prompts": len(repeated), "off_count": off, "tolerated_share": tolerated_share,
                 "mixed_counts": mixed},
    )
