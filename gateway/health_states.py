"""Each endpoint's health state, in memory, for routing to read and for probes and operators to set.

HEALTHY -> SUSPECT -> DEMOTED -> PROBATION -> HEALTHY (the probes drive it); an operator may demote
or restore an endpoint by hand, and a manual demotion holds until a manual restore. Endpoints that
were never set are healthy.

One write path: `HealthStates.transition` moves the local state and hands the transition to its
sinks (the app gives it one that publishes through the state store, so every replica adopts it
at its next sync, and one that stores it in the database when there is one). Other replicas'
states come back through `apply`, from the state store and from the database alike, under one
order (`order_key`), so a stale state never overwrites a newer one whichever way it arrives.

Reads are dict lookups with no I/O. Time is passed in (wall-clock epoch seconds).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from kernel.health import HEALTHY, STATES, EndpointHealth, HealthState, Transition, order_key

log = logging.getLogger("gateway.health")

# The names of the app's sinks (`HealthStates.transition(outcome=...)` reports by them).
STORE_SINK = "state_store"
DATABASE_SINK = "database"


class TransitionSink(Protocol):
    """Where a transition goes after the local move (the state store, the database). True when
    it took it; False when it could not (it logs why). It must not raise for its own failures."""

    async def __call__(self, t: Transition, *, actor: str | None = None, action: str | None = None) -> bool: ...


class HealthStates:
    def __init__(self, sinks: Mapping[str, TransitionSink] | None = None) -> None:
        self._states: dict[str, EndpointHealth] = {}
        self._sinks = dict(sinks or {})

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

    async def transition(
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
        actor: str | None = None,
        action: str | None = None,
        outcome: dict[str, bool] | None = None,
    ) -> Transition | None:
        """Move to `to_state`, then hand the transition to every sink (`outcome`, when given,
        gets each sink's answer by name). An operator's demotion pins the state (`manual`) until
        an operator restores it; automatic moves leave a pinned endpoint alone. None when nothing
        changes. `actor` and `action` name an operator's action for the sinks that record it."""
        t = self._move(endpoint_id, to_state, source=source, reason=reason, at=at, operator=operator,
                       score=score, evidence=evidence)
        if t is None:
            return None
        for name, sink in self._sinks.items():
            try:
                ok = await sink(t, actor=actor, action=action)
            except Exception:  # a sink's bug must not undo the move nor starve the other sinks
                log.exception("health: the %s sink failed on the %s transition of %s", name, t.to_state, endpoint_id)
                ok = False
            if outcome is not None:
                outcome[name] = ok
        return t

    def _move(
        self,
        endpoint_id: str,
        to_state: HealthState,
        *,
        source: str,
        reason: str,
        at: float,
        operator: bool,
        score: float | None,
        evidence: Mapping[str, object] | None,
    ) -> Transition | None:
        # No await in here: the read and the write of one endpoint's state are one step.
        if to_state not in STATES:
            raise ValueError(f"unknown health state {to_state!r}")
        current = self.get(endpoint_id)
        if current.manual and not operator:
            return None
        manual = operator and to_state != "healthy"
        if current.state == to_state and current.manual == manual:
            return None
        keep_score = current.score if score is None else score
        operator_at = at if operator else current.operator_at
        self._states[endpoint_id] = EndpointHealth(to_state, manual, keep_score, source, reason, at, operator_at)
        return Transition(
            endpoint_id, current.state, to_state, source, reason, at, manual, keep_score, evidence, operator_at
        )

    def set_score(self, endpoint_id: str, score: float | None) -> None:
        self._states[endpoint_id] = replace(self.get(endpoint_id), score=score)

    def apply(self, stored: Mapping[str, EndpointHealth]) -> int:
        """Adopt the states another replica stored that order after ours (`order_key`; a tie
        keeps ours, so two sources that disagree cannot take turns). Returns how many changed."""
        changed = 0
        for endpoint_id, entry in stored.items():
            mine = self._states.get(endpoint_id)
            if mine is None or order_key(entry) > order_key(mine):
                self._states[endpoint_id] = entry
                changed += 1
        return changed
