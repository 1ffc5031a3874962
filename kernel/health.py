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
