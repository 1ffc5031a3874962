"""What every probe shares: its result, the context it runs in, and the protocol it implements.

A probe has two parts kept apart: a pure statistic, `(samples) -> Outcome`, tested on its own,
and the sampling I/O that gathers those samples through a `ProbeClient`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from gateway.catalog import Endpoint
    from probes.baselines import BaselineStore
    from probes.client import ProbeClient
    from probes.settings import ProbeSettings

Verdict = Literal["pass", "fail", "inconclusive", "error"]

# How a probe's failure moves the endpoint's health (see probes.policy):
#   evidence  its e-value accumulates into the endpoint's e-CUSUM; thresholds decide
#   confirm   a confirmatory test: a failure demotes a suspect endpoint (a healthy one turns suspect)
#   suspect   an alarm (a tool-error CUSUM, a sentinel): a failure makes the endpoint suspect
#   demote    a hard rule (truncation, schema accuracy far below the reference): a failure demotes
Effect = Literal["evidence", "confirm", "suspect", "demote"]

# What a failure rests on (see probes.policy, "self-history first"):
#   self       the endpoint against itself (its golden window, its own logprobs, its own baseline)
#              or an absolute property (tool-call accuracy, truncation): valid on any engine
#   reference  only a disagreement with the reference engine: another correct engine can fail it
#              (kernels, accumulation order, templates), so alone it raises SUSPECT, never DEMOTED
Grounds = Literal["self", "reference"]

# The audit-start template check (probes.template_check): the same messages' prompt_tokens on the
# endpoint and the reference were equal, differed, or could not be compared.
TemplateStatus = Literal["same", "differs", "unknown"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A pure statistic's answer."""

    statistic: float
    p_value: float | None = None
    e_value: float | None = None
    samples: int = 0
    reference_samples: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    probe: str
    verdict: Verdict
    samples: int
    statistic: float | None = None
    p_value: float | None = None
    e_value: float | None = None
    reference_samples: int | None = None
    tokens_spent: int = 0
    details: Mapping[str, Any] | None = None
    effect: Effect = "evidence"
    requests: int = 0
    # Upstream errors seen while sampling: availability evidence, never quality evidence.
    errors: int = 0
    grounds: Grounds = "self"

    @classmethod
    def of(
        cls, probe: str, verdict: Verdict, outcome: Outcome, *, effect: Effect, tokens: int = 0, requests: int = 0,
        errors: int = 0, grounds: Grounds = "self", **details: Any,
    ) -> ProbeResult:
        return cls(
            probe=probe,
            verdict=verdict,
            samples=outcome.samples,
            statistic=outcome.statistic,
            p_value=outcome.p_value,
            e_value=outcome.e_value,
            reference_samples=outcome.reference_samples,
            tokens_spent=tokens,
            details={**outcome.details, **details},
            effect=effect,
            requests=requests,
            errors=errors,
            grounds=grounds,
        )


def verdict_from_p(p: float | None, alpha: float) -> Verdict:
    if p is None:
        return "inconclusive"
    return "fail" if p <= alpha else "pass"


@dataclass(slots=True)
class ProbeContext:
    """Everything a probe run needs; built by the runner, faked in tests."""

    endpoint: Endpoint
    client: ProbeClient  # calls this endpoint directly, outside routing, marked as probe traffic
    settings: ProbeSettings
    baselines: BaselineStore  # golden windows and self-baselines per (endpoint, probe, key)
    rng: np.random.Generator
    clock: Callable[[], float]
    # The reference engine for the endpoint's model, when one is configured or found.
    reference: ProbeClient | None = None
    # Called with (done, total) as requests complete, for progress bars.
    progress: Callable[[int, int], None] = lambda done, total: None
    # True when run as a confirmatory test (after an alarm, or to leave DEMOTED).
    confirm: bool = False
    # What the round's template check found (None: not run, e.g. no reference or switched off).
    template: TemplateStatus | None = None
    # When the runner stops this probe (the event loop's clock: its share of the audit, probes.deadline);
    # a probe that can judge what it has by then stops on its own before (None: no bound).
    deadline: float | None = None


class Probe(Protocol):
    name: ClassVar[str]
    effect: ClassVar[Effect]

    def applicable(self, endpoint: Endpoint) -> str | None:
        """None when the probe can run against this endpoint, else why not (e.g. no logprobs)."""
        ...

    async def run(self, ctx: ProbeContext) -> ProbeResult: ...
