"""Deterministic filler text of a given local token count, from a fixed word list.

Sentences vary (no two neighbours alike) so a small model is not led into repeating them, and the
same size always gives the same text: an endpoint and its reference see identical prompts.
"""

from __future__ import annotations

from collections.abc import Callable

ADJECTIVES = ("quiet", "green", "old", "small", "bright", "warm", "wide", "calm", "plain", "soft", "tall")
NOUNS = ("river", "garden", "house", "road", "field", "window", "bridge", "market", "hill", "table", "lamp", "door", "forest")
VERBS = ("rests", "stands", "waits", "shines", "turns", "sits", "grows", "fades", "opens")
PLACES = ("by the sea", "in the valley", "under the sky", "after the rain", "at noon", "in the town", "near the wall")


def sentence(i: int) -> str:
    """The i-th filler sentence; the cycle lengths are coprime, so sentences repeat rarely."""
    return (
        f"The {ADJECTIVES[i % len(ADJECTIVES)]} {NOUNS[i % len(NOUNS)]} "
        f"{VERBS[i % len(VERBS)]} {PLACES[i % len(PLACES)]}."
    )


def filler_sentences(tokens: int, count: Callable[[str], int]) -> list[str]:
    """Sentences whose text (joined by spaces) has about `tokens` local tokens, never more.

    Counting each sentence with its leading space is exact for cl100k: a space-led word and the
    sentence's final full stop are separate pre-tokens, so counts add up across the join.
    """
    out: list[str] = []
    total = 0
    i = 0
    while True:
        s = sentence(i)
        n = count(s if not out else " " + s)
        if total + n > tokens:
            return out
        out.append(s)
        total += n
        i += 1


def with_needle(sentences: list[str], needle: str, depth: float) -> str:
    """The filler with `needle` inserted after the share `depth` of its sentences."""
    at = min(len(sentences), max(0, round(depth * len(sentences))))
    return " ".join([*sentences[:at], needle, *sentences[at:]])
