"""Endpoint health states in memory: transitions, operator pins, adopting stored states."""

from __future__ import annotations

import pytest

from gateway.health_states import HealthStates
from kernel.health import EndpointHealth


def test_unknown_endpoints_are_healthy() -> None:
    states = HealthStates()
    assert states.state("x") == "healthy" and states.routable("x") and states.get("x").score is None


def test_transitions_report_what_changed() -> None:
    states = HealthStates()
    t = states.transition("x", "suspect", source="probe", reason="drift", at=1.0, score=0.6, evidence={"p": 0.01})
    assert t is not None and (t.from_state, t.to_state, t.score, t.evidence) == ("healthy", "suspect", 0.6, {"p": 0.01})
    assert states.transition("x", "suspect", source="probe", reason="again", at=2.0) is None  # no change
    t = states.transition("x", "demoted", source="probe", reason="more drift", at=3.0)
    assert t is not None and t.score == 0.6  # the score carries over
    assert not states.routable("x")
    with pytest.raises(ValueError):
        states.transition("x", "broken", source="probe", reason="", at=4.0)  # type: ignore[arg-type]


def test_an_operator_pin_holds_until_an_operator_restores() -> None:
    states = HealthStates()
    assert states.transition("x", "demoted", source="manual", reason="bad", at=1.0, operator=True) is not None
    assert states.get("x").manual
    assert (
        states.transition("x", "healthy", source="probe", reason="looks fine", at=2.0) is None
    )  # probes cannot undo it
    assert states.state("x") == "demoted"
    t = states.transition("x", "healthy", source="manual", reason="fixed", at=3.0, operator=True)
    assert t is not None and not states.get("x").manual
    assert states.transition("x", "suspect", source="probe", reason="drift", at=4.0) is not None  # probes again


def test_pinning_an_already_demoted_endpoint_is_a_transition() -> None:
    states = HealthStates()
    states.transition("x", "demoted", source="probe", reason="drift", at=1.0)
    t = states.transition("x", "demoted", source="manual", reason="keep it out", at=2.0, operator=True)
    assert t is not None and t.manual and states.get("x").manual


def test_apply_adopts_newer_stored_states_only() -> None:
    states = HealthStates()
    states.transition("x", "suspect", source="probe", reason="local", at=10.0)
    changed = states.apply(
        {
            "x": EndpointHealth("demoted", True, None, "manual", "older", since=5.0),
            "y": EndpointHealth("probation", False, 0.9, "probe", "recovering", since=1.0),
        }
    )
    assert changed == 1
    assert states.state("x") == "suspect"  # ours is newer
    assert states.state("y") == "probation" and states.get("y").score == 0.9
    states.apply({"x": EndpointHealth("demoted", True, None, "manual", "newer", since=11.0)})
    assert states.state("x") == "demoted"


def test_set_score() -> None:
    states = HealthStates()
    states.set_score("x", 0.42)
    assert states.get("x").score == 0.42 and states.state("x") == "healthy"
