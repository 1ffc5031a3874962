"""A Bernoulli CUSUM: is the rate of bad events still p0, or has it risen to p1?

Each observation adds its log-likelihood ratio, `log(p1/p0)` for a bad event and
`log((1-p1)/(1-p0))` (negative) for a good one; the statistic is floored at 0 and raises an
alarm when it reaches `h`, after which it restarts from 0. Pure: the caller keeps the statistic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class BernoulliCusum:
    p0: float  # the in-control rate of bad events
    p1: float  # the rate to detect
    h: float  # the alarm threshold

    def __post_init__(self) -> None:
        if not 0 < self.p0 < self.p1 < 1:
            raise ValueError(f"need 0 < p0 < p1 < 1, got p0={self.p0}, p1={self.p1}")
        if self.h <= 0:
            raise ValueError(f"the threshold h must be positive, got {self.h}")

    @property
    def bad_step(self) -> float:
        return math.log(self.p1 / self.p0)

    @property
    def good_step(self) -> float:
        return math.log((1 - self.p1) / (1 - self.p0))

    def step(self, s: float, bad: bool) -> tuple[float, bool]:
        """The next statistic after one observation, and whether it alarmed (then it restarts at 0)."""
        s = max(0.0, s + (self.bad_step if bad else self.good_step))
        if s >= self.h:
            return 0.0, True
        return s, False

    def run(self, observations: Iterable[bool], s: float = 0.0) -> tuple[float, list[int]]:
        """Feed many observations; the final statistic and the (0-based) positions of every alarm."""
        alarms = []
        for i, bad in enumerate(observations):
            s, alarm = self.step(s, bad)
            if alarm:
                alarms.append(i)
        return s, alarms

    def first_alarm(self, observations: np.ndarray) -> int | None:
        """The 0-based position of the first alarm over a boolean array, or None (for simulations)."""
        bad, good = self.bad_step, self.good_step
        s = 0.0
        for i, x in enumerate(observations.tolist()):
            s = s + bad if x else max(0.0, s + good)
            if s >= self.h:
                return i
        return None


def run_lengths(
    cusum: BernoulliCusum, rate: float, *, runs: int, horizon: int, rng: np.random.Generator
) -> np.ndarray:
    """Simulated steps to the first alarm at a true bad-event rate (`horizon + 1` when none came)."""
    out = np.empty(runs, dtype=np.int64)
    for r in range(runs):
        first = cusum.first_alarm(rng.random(horizon) < rate)
        out[r] = horizon + 1 if first is None else first + 1
    return out
