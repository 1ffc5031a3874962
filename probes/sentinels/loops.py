"""Loop detection: responses that run to `max_tokens` repeating themselves.

A response loops when it ends with `finish_reason=length` and its repeated n-gram ratio is above a
threshold. Loop-prone prompts are sent at T=0 (repeated) and, seeded, at T>0; loops that come and
go between T=0 repeats are tested against a floor, prompts whose greedy answer loops against a
higher one, and the seeded answers one-sided against those the reference (or the endpoint's own
frozen baseline) gave on the same cells (`loop_test`). Cells where the reference itself loops
carry no signal.
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


def greedy(key: str) -> bool:
    """Whether a cell holds T=0 repeats of one request (`loop_plan` names them `p<i>@t0`)."""
    return key.endswith("@t0")


def _tail(loops: int, n: int, share: float) -> float:
    """One-sided binomial p of `loops` or more in `n` at `share` (1 without a loop)."""
    return float(stats.binom.sf(loops - 1, n, share)) if loops else 1.0


def loop_test(
    observed: Sequence[LoopCell], expected: Mapping[str, LoopCell] | None, *, floor: float, answer_floor: float,
    informative_below: float, alpha: float,
) -> Outcome:
    """Excess loops, by up to three tests (Bonferroni over the parts that have answers):

    - repeats: the T=0 repeats that disagree with their cell's answer (loop where most repeats do
      not, or do not where most do), one-sided binomial against `floor`. An engine answers one T=0
      request the same way each time but for rare nondeterminism, so loops that come and go are a
      fault's, on any engine;
    - greedy: the T=0 cells whose answer loops (most repeats do), one-sided binomial against
      `answer_floor`. Engines' greedy answers differ: one prompt whose greedy answer looped on an
      honest engine, counted once per repeat, failed the test at p = 5.7e-05; counted once, a
      greedy loop is one answer of a few, and only most prompts looping is a finding;
    - sampled: the seeded answers at T>0, one-sided Fisher exact test against the expected ones on
      the same cells (a reference's 0 of 10 is a sample, not a share of 0); without an
      expectation, binomial against `answer_floor` (a model's sampled answers loop by themselves).
      Loops only at T>0 are nearly invisible at small sizes (a fault meant to be seen loops
      whatever the request).

    Cells whose expected share reaches `informative_below` are left out. `details["finding"]` is
    loops or clean.
    """
    expected = expected or {}
    kept = [c for c in observed if c.n and (c.key not in expected or expected[c.key].share < informative_below)]
    details: dict[str, Any] = {
        "cells": {c.key: [c.loops, c.n] for c in observed},
        "left_out": sorted(c.key for c in observed if c not in kept),
        "expected": {key: [c.loops, c.n] for key, c in expected.items()},
    }
    n = sum(c.n for c in kept)
    if not n:
        return Outcome(0.0, samples=0, details={**details, "finding": "uninformative"})
    t0 = [c for c in kept if greedy(c.key)]
    # A repeat that disagrees with its cell's answer, looping or not: a looping answer's clean
    # repeats are the same evidence of answers that come and go.
    r_k, r_n = sum(min(c.loops, c.n - c.loops) for c in t0), sum(c.n for c in t0)
    g_k, g_n = sum(2 * c.loops > c.n for c in t0), len(t0)
    sampled = [c for c in kept if not greedy(c.key)]
    if matched := [c for c in sampled if c.key in expected]:
        sampled = matched  # against the reference's own cells only (one it lost has no match)
    s_k, s_n = sum(c.loops for c in sampled), sum(c.n for c in sampled)
    x_k, x_n = sum(expected[c.key].loops for c in matched), sum(expected[c.key].n for c in matched)
    if s_k and x_n:
        table = [[s_k, s_n - s_k], [x_k, x_n - x_k]]
        p_sampled = float(stats.fisher_exact(table, alternative="greater").pvalue)
    else:
        p_sampled = _tail(s_k, s_n, answer_floor)
    parts: dict[str, dict[str, Any]] = {
        "repeats": {"loops": r_k, "n": r_n, "p_value": _tail(r_k, r_n, floor)},
        "greedy": {"loops": g_k, "n": g_n, "p_value": _tail(g_k, g_n, answer_floor)},
        "sampled": {"loops": s_k, "n": s_n, "expected": [x_k, x_n], "p_value": p_sampled},
    }
    tested = [part["p_value"] for part in parts.values() if part["n"]]
    p = min(1.0, len(tested) * min(tested))
    k = sum(c.loops for c in kept)
    return Outcome(
        k / n,
        p_value=p,
        samples=n,
        reference_samples=sum(c.n for c in expected.values()) or None,
        details={**details, **parts, "loops": k, "finding": "loops" if p <= alpha else "clean"},
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
