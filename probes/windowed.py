"""What the sampled statistical probes (logprob drift, distribution, fidelity) share: a meter of
their progress and of what the endpoint's client spent, the window's verdict and e-value, and the
shape of their result."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar, Protocol

from probes.base import Effect, Grounds, Outcome, ProbeContext, ProbeResult, Verdict, verdict_from_p
from probes.settings import HealthSettings
from probes.stats.evalues import window_e


class Meter:
    """Counts requests done of `total` (reported through the context, for progress bars) and what
    the endpoint's client spent since the meter was made."""

    def __init__(self, ctx: ProbeContext, total: int) -> None:
        self._ctx = ctx
        self.total = total
        self.done = 0
        self._requests0, self._tokens0 = ctx.client.requests, ctx.client.tokens

    def step(self) -> None:
        self.done += 1
        self._ctx.progress(self.done, self.total)

    def spent(self, errors: int) -> dict[str, int]:
        client = self._ctx.client
        return {"tokens": client.tokens - self._tokens0, "requests": client.requests - self._requests0, "errors": errors}


def judged(outcome: Outcome, alpha: float, health: HealthSettings) -> tuple[Verdict, Outcome]:
    """The window's verdict at `alpha`, and the outcome with its window e-value when it has a p-value."""
    if outcome.p_value is not None:
        outcome = replace(outcome, e_value=window_e(outcome.p_value, alpha, health))
    return verdict_from_p(outcome.p_value, alpha), outcome


class Named(Protocol):
    name: ClassVar[str]
    effect: ClassVar[Effect]


def result(
    probe: Named, verdict: Verdict, outcome: Outcome, spent: Mapping[str, int], alpha: float, *,
    grounds: Grounds = "self", **details: Any,
) -> ProbeResult:
    return ProbeResult.of(
        probe.name, verdict, outcome, effect=probe.effect, tokens=spent["tokens"], requests=spent["requests"],
        errors=spent["errors"], grounds=grounds, alpha=alpha, **details,
    )
