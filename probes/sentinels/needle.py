"""Needle retrieval: a unique code hidden at several depths of filler, sizes up to the advertised
context window, asked for at T=0. A silent truncation cuts either the needle (keep the tail) or
the question (keep the head), so retrieval fails beyond some size while it passes below.

Small models retrieve poorly, so each (size, depth) cell is judged against what is expected of it:
the reference's answer to the identical prompt, else the endpoint's own frozen baseline, else
"found" everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from probes.base import Outcome
from probes.sentinels.filler import filler_sentences, with_needle

QUESTION = "What is the secret code in the text above? Answer with the code only."
# Used to size prompts when the endpoint reports no usage: generous for any English tokenizer.
FALLBACK_SLOPE, FALLBACK_INTERCEPT = 1.5, 32.0


@dataclass(frozen=True, slots=True)
class NeedleCell:
    size: int  # local tokens of filler
    depth: float
    found: bool | None  # None: the request failed
    expected: bool | None = True  # None: nothing known about this cell

    @property
    def key(self) -> str:
        return f"{self.size}@{self.depth}"


def plan_sizes(
    window: int, *, slope: float, intercept: float, max_tokens: int, margin_tokens: int, margin_share: float,
    min_size: int, shrink: float, cap: int, upper_shares: Sequence[float] = (),
) -> list[int]:
    """Filler sizes (local tokens), ascending: the largest that fits the window with a margin,
    then shrinking by `shrink` down to `min_size`, which is always included, and besides that
    ladder the sizes at `upper_shares` of the largest (a cut between half and the whole window
    then falls between sizes, not only below the largest)."""
    room = (window - max_tokens - margin_tokens) * (1 - margin_share) - intercept
    largest = min(cap, int(room / slope)) if slope > 0 else min_size
    if largest <= min_size:
        return [max(16, largest)]
    sizes = [int(largest * share) for share in upper_shares if largest * share > min_size]
    size = float(largest)
    while size > min_size:
        sizes.append(int(size))
        size /= shrink
    sizes.append(min_size)
    return sorted(set(sizes))


def make_code(rng: np.random.Generator, digits: int) -> str:
    """A random code of `digits` digits with a non-zero lead (unique per prompt, never filler)."""
    return str(int(rng.integers(1, 10))) + "".join(str(int(d)) for d in rng.integers(0, 10, digits - 1))


def needle_body(sentences: list[str], code: str, depth: float, max_tokens: int) -> dict[str, Any]:
    text = with_needle(sentences, f"The secret code is {code}.", depth)
    return {"messages": [{"role": "user", "content": f"{text}\n\n{QUESTION}"}], "max_tokens": max_tokens, "temperature": 0}


def build_bodies(
    sizes: Sequence[int], depths: Sequence[float], rng: np.random.Generator, count_text: Callable[[str], int], *,
    digits: int, max_tokens: int,
) -> list[tuple[int, float, str, dict[str, Any]]]:
    """(size, depth, code, body) for every cell, a fresh code in each."""
    out = []
    for size in sizes:
        sentences = filler_sentences(size, count_text)
        for depth in depths:
            code = make_code(rng, digits)
            out.append((size, depth, code, needle_body(sentences, code, depth, max_tokens)))
    return out


def retrieved(answer: str, code: str) -> bool:
    """Whether the answer holds the code, spaces or separators between its digits allowed."""
    return code in re.sub(r"(?<=\d)[\s,.\-](?=\d)", "", answer)


def judge_retrieval(cells: Sequence[NeedleCell], *, min_lost: int, noise_cells: int = 0) -> Outcome:
    """Cells lost (expected found, not found) and their pattern.

    `details["finding"]`: truncation (losses start at some size, retrieval works below it, and at
    each depth, once lost, stays lost at every larger size: a cut only grows with the prompt),
    degraded (losses without that pattern, e.g. at the smallest size), retrieved, or uninformative
    (nothing expected anywhere).
    A lost cell found again at a larger size of its depth is no cut's doing: up to `noise_cells`
    of them, all below the cut, are borderline retrievals that flipped with engine numerics
    (batching, cache reuse) and do not hide the pattern (`details["noise"]`; the cut's own cells
    are `details["cut"]`).
    The statistic is the share of informative cells lost.
    """
    answered = [c for c in cells if c.found is not None]
    informative = [c for c in answered if c.expected]
    lost = [c for c in informative if not c.found]
    gained = [c for c in answered if c.expected is False and c.found]
    table = [{"size": c.size, "depth": c.depth, "found": c.found, "expected": c.expected} for c in cells]
    details: dict[str, Any] = {
        "cells": table,
        "lost": [c.key for c in lost],
        "gained": [c.key for c in gained],
        "informative": len(informative),
    }
    if not informative:
        return Outcome(0.0, samples=len(answered), details={**details, "finding": "uninformative"})
    share = len(lost) / len(informative)
    if len(lost) < min_lost or len(lost) < 2 * len(gained):
        return Outcome(share, samples=len(answered), details={**details, "finding": "retrieved"})
    cut, noise = _split_losses(informative)
    details.update(cut=[c.key for c in cut], noise=[c.key for c in noise])
    first_lost = min(c.size for c in cut) if cut else min(c.size for c in lost)
    kept_below = [c.size for c in informative if c.size < first_lost]
    largest = max(c.size for c in informative)
    truncation = (
        len(cut) >= min_lost and bool(kept_below) and any(c.size == largest for c in cut)
        and len(noise) <= noise_cells and all(c.size < first_lost for c in noise)
    )
    details.update(first_lost_size=first_lost, last_kept_size=max(kept_below) if kept_below else None)
    return Outcome(share, samples=len(answered), details={**details, "finding": "truncation" if truncation else "degraded"})


def _split_losses(informative: Sequence[NeedleCell]) -> tuple[list[NeedleCell], list[NeedleCell]]:
    """(cut, noise): per depth, the lost cells larger than every found one (what a cut would lose)
    and the lost cells with a found one above them (what no cut loses), each by size."""
    cut: list[NeedleCell] = []
    noise: list[NeedleCell] = []
    for depth in sorted({c.depth for c in informative}):
        row = sorted((c for c in informative if c.depth == depth), key=lambda c: c.size)
        found_sizes = [c.size for c in row if c.found]
        last_found = max(found_sizes) if found_sizes else None
        for c in row:
            if not c.found:
                (noise if last_found is not None and c.size < last_found else cut).append(c)
    return sorted(cut, key=_by_size), sorted(noise, key=_by_size)


def _by_size(c: NeedleCell) -> tuple[int, float]:
    return c.size, c.depth
