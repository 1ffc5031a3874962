"""Reported `usage.prompt_tokens` against the local (cl100k) count.

Tokenizers differ, so the check does not expect equal counts: it fits reported = a + b * local on
short prompts no deployment truncates, then expects long prompts on that line. A long prompt
reported well below the line was cut before the model saw it (a truncating endpoint that reports
what it processed). Where a reference or the endpoint's own frozen baseline exists, the counts of
identical prompts must also match theirs within a couple of tokens (same tokenizer and template).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from probes.base import Outcome
from probes.sentinels.filler import filler_sentences
from probes.sentinels.sampling import Sampler, prompt_tokens


@dataclass(frozen=True, slots=True)
class UsagePoint:
    label: str
    local: int
    reported: int | None


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept); a single point gives the line through the origin."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if len(x) == 1:
        return float(y[0] / x[0]) if x[0] else 0.0, 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def check_linear(
    fit: Sequence[UsagePoint], long: Sequence[UsagePoint], *, rel_tolerance: float, abs_tolerance: int, min_slope: float
) -> Outcome:
    """Whether long prompts' reported counts stay on the line the short ones draw.

    `details["finding"]`: linear, flattened (reported below the line: cut), excess (above: billed
    for more than was sent), flat (the short prompts' counts barely grow), no_usage or too_few.
    The statistic is the largest relative shortfall below the line (0 when none).
    """
    # A point without a reported count is a failed request or an endpoint that reports no usage.
    fit = [p for p in fit if p.reported is not None]
    long = [p for p in long if p.reported is not None]
    points = [*fit, *long]
    if not points:
        return Outcome(0.0, details={"finding": "no_usage"})
    if len(fit) < 2:
        return Outcome(0.0, samples=len(points), details={"finding": "too_few"})
    slope, intercept = fit_line([p.local for p in fit], [p.reported or 0 for p in fit])
    table = []
    flattened: list[str] = []
    excess: list[str] = []
    worst = 0.0
    for p in long:
        predicted = intercept + slope * p.local
        reported = p.reported or 0
        shortfall = predicted - reported
        rel = shortfall / predicted if predicted > 0 else 0.0
        table.append({"label": p.label, "local": p.local, "reported": reported, "predicted": round(predicted, 1)})
        if abs(shortfall) > abs_tolerance and abs(rel) > rel_tolerance:
            (flattened if shortfall > 0 else excess).append(p.label)
        worst = max(worst, rel)
    finding = "flat" if slope < min_slope else "flattened" if flattened else "excess" if excess else "linear"
    cut = [p for p in long if p.label in flattened]
    return Outcome(
        worst,
        samples=len(points),
        details={
            "finding": finding,
            "slope": round(slope, 4),
            "intercept": round(intercept, 2),
            "fit": [{"label": p.label, "local": p.local, "reported": p.reported} for p in fit],
            "long": table,
            "flattened": flattened,
            "excess": excess,
            # What the endpoint says it processed of the shortest cut prompt: about where it cuts.
            "cut_reported": min((p.reported or 0) for p in cut) if cut else None,
            "first_cut_local": min(p.local for p in cut) if cut else None,
        },
    )


def compare_counts(observed: Mapping[str, int | None], expected: Mapping[str, Any], *, tolerance: int) -> Outcome:
    """Reported counts of identical prompts against the reference's (or the frozen baseline's)."""
    pairs = {k: (v, expected.get(k)) for k, v in observed.items() if v is not None and expected.get(k) is not None}
    if not pairs:
        return Outcome(0.0, details={"finding": "no_pairs"})
    diffs = {k: int(v) - int(e) for k, (v, e) in pairs.items()}
    mismatched = sorted(k for k, d in diffs.items() if abs(d) > tolerance)
    return Outcome(
        float(max(abs(d) for d in diffs.values())),
        samples=len(pairs),
        details={"finding": "mismatch" if mismatched else "match", "differences": diffs, "mismatched": mismatched},
    )


def fit_bodies(sizes: Sequence[int], count_text: Any) -> list[tuple[str, dict[str, Any]]]:
    """(label, body) for each short usage prompt: filler of `size` local tokens, one output token."""
    out = []
    for size in sizes:
        text = " ".join(filler_sentences(size, count_text)) + "\n\nReply with OK."
        out.append((f"fit:{size}", {"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0}))
    return out


async def sample_points(
    sampler: Sampler, labelled: Sequence[tuple[str, dict[str, Any]]], count_chat: Any
) -> tuple[list[UsagePoint], list[dict[str, Any] | None]]:
    """Send the bodies; each answer's reported count beside the local count of its messages."""
    answers = await sampler.chat_many([body for _, body in labelled])
    points = [
        UsagePoint(label, count_chat(body["messages"]), prompt_tokens(answer))
        for (label, body), answer in zip(labelled, answers, strict=True)
    ]
    return points, answers
