"""Health-state values: what an endpoint's state is, and one move between states.

HEALTHY -> SUSPECT -> DEMOTED -> PROBATION -> HEALTHY; `gateway.health_states.HealthStates` holds
them per endpoint. Times are wall-clock epoch seconds (they are stored and shared by replicas).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

HealthState = Literal["healthy", "suspect", "demoted", "probation"]
STATES: tuple[HealthState, ...] = ("healthy", "suspect", "demoted", "probation")


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    state: HealthState = "healthy"
    manual: bool = False  # set by an operator: probes leave it alone until a manual restore
    score: float | None = None
    source: str = "default"
    reason: str = ""
    since: float = 0.0
    # When an operator last set this endpoint (0: never). Automatic moves inherit it from the
    # state they moved from, so one made on a view that had not yet seen an operator's action
    # orders below that action (see `order_key`).
    operator_at: float = 0.0


HEALTHY = EndpointHealth()


@dataclass(frozen=True, slots=True)
class Transition:
    endpoint_id: str
    from_state: HealthState
    to_state: HealthState
    source: str
    reason: str
    at: float
    manual: bool = False
    score: float | None = None
    evidence: Mapping[str, object] | None = None
    operator_at: float = 0.0

    def entry(self) -> EndpointHealth:
        """The endpoint's state after this transition."""
        return EndpointHealth(
            self.to_state, self.manual, self.score, self.source, self.reason, self.at, self.operator_at
        )


def order_key(entry: EndpointHealth) -> tuple[float, float]:
    """States of one endpoint order by the operator's last action first, then by time: an
    operator's pin outranks an automatic move that a replica made before it had seen the pin,
    and a restore outranks the pin; otherwise the later state wins. A total order, so every
    replica ends on the same state whatever order the states reach it in."""
    return (entry.operator_at, entry.since)
