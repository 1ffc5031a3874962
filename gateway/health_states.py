"""Each endpoint's health state, in memory, for routing to read and for probes and operators to set.

HEALTHY -> SUSPECT -> DEMOTED -> PROBATION -> HEALTHY (the probes drive it); an operator may demote
or restore an endpoint by hand, and a manual demotion holds until a manual restore. Endpoints that
were never set are healthy. Persisted transitions and the current states live in the database
(`gateway.persistence.health`); every replica pulls the current states periodically.

Reads are dict lookups with no I/O. Time is passed in (wall-clock epoch seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kernel.health import HEALTHY, STATES, EndpointHealth, HealthState, Transition


class HealthStates:
    def __init__(self) -> None:
        self._states: dict[str, EndpointHealth] = {}

    def get(self, endpoint_id: str) -> EndpointHealth:
        return self._states.get(endpoint_id, HEALTHY)

    def state(self, endpoint_id: str) -> HealthState:
        entry = self._states.get(endpoint_id)
        return entry.state if entry is not None else "healthy"

    def routable(self, endpoint_id: str) -> bool:
        """False while demoted (the router still fails open on the last endpoint of a model)."""
        return self.state(endpoint_id) != "demoted"

    def snapshot(self) -> dict[str, EndpointHealth]:
        return dict(self._states)

    def transition(
        self,
        endpoint_id: str,
        to_state: HealthState,
        *,
        source: str,
        reason: str,
        at: float,
        operator: bool = False,
        score: float | None = None,
        evidence: Mapping[str, object] | None = None,
    ) -> Transition | None:
        """Move to `to_state`. An operator's demotion pins the state (`manual`) until an operator
        restores it; automatic moves leave a pinned endpoint alone. None when nothing changes."""
        if to_state not in STATES:
            raise ValueError(f"unknown health state {to_state!r}")
        current = self.get(endpoint_id)
        if current.manual and not operator:
            return None
        manual = operator and to_state != "healthy"
        if current.state == to_state and current.manual == manual:
            return None
        keep_score = current.score if score is None else score
        self._states[endpoint_id] = EndpointHealth(to_state, manual, keep_score, source, reason, at)
        return Transition(endpoint_id, current.state, to_state, source, reason, at, manual, keep_score, evidence)

    def set_score(self, endpoint_id: str, score: float | None) -> None:
        self._states[endpoint_id] = replace(self.get(endpoint_id), score=score)

    def apply(self, stored: Mapping[str, EndpointHealth]) -> int:
        """Adopt states another replica stored, unless ours is newer. Returns how many changed."""
        changed = 0
        for endpoint_id, entry in stored.items():
            mine = self._states.get(endpoint_id)
            if mine is None or (entry.since >= mine.since and entry != mine):
                self._states[endpoint_id] = entry
                changed += 1
        return changed
