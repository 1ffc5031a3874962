"""Loop detection: responses that run to `max_tokens` repeating themselves.

A response loops when it ends with `finish_reason=length` and its repeated n-gram ratio is above a
threshold. Loop-prone prompts are sent at T=0 (repeated) and, seeded, at T>0; the share of looping
responses is tested one-sided against the share the reference (or the endpoint's own frozen
baseline) shows on the same cells. Cells where the reference itself loops carry no signal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from probes.base import Outcome


def repeated_ngram_ratio(units: Sequence[str], n: int) -> float:
    """1 - distinct n-grams / n-grams: 0 for text that never repeats, near 1 for a loop."""
    grams = [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def repetition(text: str, *, word_n: int, char_n: int) -> float:
    """The larger of the word and character n-gram ratios (a loop of subword pieces has no spaces).

    Character n-grams shrink for short texts (to a quarter of the length, at least 2), so a short
    loop such as "1.1.1.1.1." still counts.
    """
    chars = min(char_n, max(2, len(text) // 4))
    return max(repeated_ngram_ratio(text.split(), word_n), repeated_ngram_ratio(list(text), chars))


def is_loop(text: str, finish_reason: str | None, *, threshold: float, word_n: int, char_n: int) -> bool:
    return finish_reason == "length" and repetition(text, word_n=word_n, char_n=char_n) > threshold


@dataclass(frozen=True, slots=True)
class LoopCell:
    """One (prompt, temperature) cell: `loops` of `n` responses looped."""

    key: str
    loops: int
    n: int

    @property
    def share(self) -> float:
        return self.loops / self.n if self.n else 0.0


def loop_test(
    observed: Sequence[LoopCell], expected: Mapping[str, LoopCell] | None, *, floor: float, informative_below: float,
    alpha: float,
) -> Outcome:
    """One-sided binomial test of the looping share against the expected share.

    The null share is the expected shares weighted by the observed cells' sizes, never below
    `floor`; cells whose expected share reaches `informative_below` are left out. Without an
    expectation the null share is the floor. `details["finding"]` is loops or clean.
    """
    expected = expected or {}
    kept = [c for c in observed if c.n and (c.key not in expected or expected[c.key].share < informative_below)]
    left_out = sorted(c.key for c in observed if c not in kept)
    n = sum(c.n for c in kept)
    k = sum(c.loops for c in kept)
    details: dict[str, Any] = {
        "cells": {c.key: [c.loops, c.n] for c in observed},
        "left_out": left_out,
        "expected": {key: [c.loops, c.n] for key, c in expected.items()},
    }
    if not n:
        return Outcome(0.0, samples=0, details={**details, "finding": "uninformative"})
    null = sum(c.n * (expected[c.key].share if c.key in expected else 0.0) for c in kept) / n
    null = max(floor, null)
    p = float(stats.binom.sf(k - 1, n, null)) if k else 1.0
    return Outcome(
        k / n,
        p_value=p,
        samples=n,
        reference_samples=sum(c.n for c in expected.values()) or None,
        details={**details, "null_share": round(null, 4), "loops": k, "finding": "loops" if p <= alpha else "clean"},
    )


@dataclass(frozen=True, slots=True)
class LoopRequest:
    key: str
    body: dict[str, Any]


def loop_plan(
    prompts: Sequence[str], *, repeats: int, sampled_prompts: int, samples: int, temperature: float, seed: int,
    max_tokens: int, system: str | None = None,
) -> list[LoopRequest]:
    """T=0 requests (`repeats` per prompt) and seeded samples at `temperature` (seeds `seed`...)."""
    head = [{"role": "system", "content": system}] if system is not None else []
    out = []
    for i, prompt in enumerate(prompts):
        messages = [*head, {"role": "user", "content": prompt}]
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        out += [LoopRequest(f"p{i}@t0", body) for _ in range(repeats)]
    for i, prompt in enumerate(prompts[:sampled_prompts]):
        messages = [*head, {"role": "user", "content": prompt}]
        out += [
            LoopRequest(
                f"p{i}@t{temperature}",
                {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, "seed": seed + j},
            )
            for j in range(samples)
        ]
    return out


def reference_plan(plan: Sequence[LoopRequest]) -> list[LoopRequest]:
    """The reference's share of a cell: T=0 cells once (a stack repeats itself at T=0; the floor
    covers batched engines' nondeterminism), seeded cells with every seed."""
    seen: set[str] = set()
    out = []
    for r in plan:
        if r.body.get("temperature") == 0:
            if r.key in seen:
                continue
            seen.add(r.key)
        out.append(r)
    return out


def tally(plan: Sequence[LoopRequest], looped: Sequence[bool | None]) -> list[LoopCell]:
    """Cells from per-request outcomes (None: the request failed and is not counted)."""
    counts: dict[str, list[int]] = {}
    for r, loop in zip(plan, looped, strict=True):
        if loop is None:
            continue
        cell = counts.setdefault(r.key, [0, 0])
        cell[0] += int(loop)
        cell[1] += 1
    return [LoopCell(key, k, n) for key, (k, n) in counts.items()]
