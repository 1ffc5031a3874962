"""Endpoint health states in memory: transitions, operator pins, the sinks every transition goes
to, and adopting stored states under one order."""

from __future__ import annotations

import pytest

from gateway.health_states import HealthStates
from kernel.health import EndpointHealth, Transition, order_key


def test_unknown_endpoints_are_healthy() -> None:
    states = HealthStates()
    assert states.state("x") == "healthy" and states.routable("x") and states.get("x").score is None


async def test_transitions_report_what_changed() -> None:
    states = HealthStates()
    t = await states.transition("x", "suspect", source="probe", reason="drift", at=1.0, score=0.6, evidence={"p": 0.01})
    assert t is not None and (t.from_state, t.to_state, t.score, t.evidence) == ("healthy", "suspect", 0.6, {"p": 0.01})
    assert await states.transition("x", "suspect", source="probe", reason="again", at=2.0) is None  # no change
    t = await states.transition("x", "demoted", source="probe", reason="more drift", at=3.0)
    assert t is not None and t.score == 0.6  # the score carries over
    assert not states.routable("x")
    with pytest.raises(ValueError):
        await states.transition("x", "broken", source="probe", reason="", at=4.0)  # type: ignore[arg-type]


async def test_an_operator_pin_holds_until_an_operator_restores() -> None:
    states = HealthStates()
    assert await states.transition("x", "demoted", source="manual", reason="bad", at=1.0, operator=True) is not None
    assert states.get("x").manual
    assert (
        await states.transition("x", "healthy", source="probe", reason="looks fine", at=2.0) is None
    )  # probes cannot undo it
    assert states.state("x") == "demoted"
    t = await states.transition("x", "healthy", source="manual", reason="fixed", at=3.0, operator=True)
    assert t is not None and not states.get("x").manual
    assert await states.transition("x", "suspect", source="probe", reason="drift", at=4.0) is not None  # probes again


async def test_pinning_an_already_demoted_endpoint_is_a_transition() -> None:
    states = HealthStates()
    await states.transition("x", "demoted", source="probe", reason="drift", at=1.0)
    t = await states.transition("x", "demoted", source="manual", reason="keep it out", at=2.0, operator=True)
    assert t is not None and t.manual and states.get("x").manual


async def test_automatic_moves_inherit_the_operators_last_action() -> None:
    states = HealthStates()
    await states.transition("x", "suspect", source="probe", reason="drift", at=5.0)
    assert states.get("x").operator_at == 0.0
    await states.transition("x", "demoted", source="manual", reason="out", at=10.0, operator=True)
    t = await states.transition("x", "healthy", source="manual", reason="back", at=20.0, operator=True)
    assert t is not None and t.operator_at == 20.0
    t = await states.transition("x", "suspect", source="probe", reason="drift", at=30.0)
    assert t is not None and t.operator_at == 20.0 and t.entry() == states.get("x")
    assert order_key(states.get("x")) == (20.0, 30.0)


class Sink:
    def __init__(self, answer: bool = True, fail: bool = False) -> None:
        self.got: list[tuple[Transition, str | None, str | None]] = []
        self.answer, self.fail = answer, fail

    async def __call__(self, t: Transition, *, actor: str | None = None, action: str | None = None) -> bool:
        self.got.append((t, actor, action))
        if self.fail:
            raise RuntimeError("sink bug")
        return self.answer


async def test_every_transition_goes_to_every_sink_and_nothing_else_does() -> None:
    store, db = Sink(), Sink(answer=False)
    states = HealthStates({"state_store": store, "database": db})
    outcome: dict[str, bool] = {}
    t = await states.transition(
        "x", "demoted", source="manual", reason="r", at=1.0, operator=True, actor="alice", action="demote", outcome=outcome
    )
    assert t is not None
    assert store.got == [(t, "alice", "demote")] and db.got == [(t, "alice", "demote")]
    assert outcome == {"state_store": True, "database": False}
    assert await states.transition("x", "demoted", source="manual", reason="r", at=2.0, operator=True) is None
    states.apply({"y": EndpointHealth("suspect", since=3.0)})  # adopted from elsewhere: not re-emitted
    assert len(store.got) == len(db.got) == 1


async def test_a_failing_sink_neither_undoes_the_move_nor_starves_the_others(caplog: pytest.LogCaptureFixture) -> None:
    broken, db = Sink(fail=True), Sink()
    states = HealthStates({"state_store": broken, "database": db})
    outcome: dict[str, bool] = {}
    t = await states.transition("x", "suspect", source="probe", reason="drift", at=1.0, outcome=outcome)
    assert t is not None and states.state("x") == "suspect" and len(db.got) == 1
    assert outcome == {"state_store": False, "database": True}
    assert "the state_store sink failed" in caplog.text


def test_apply_adopts_newer_stored_states_only() -> None:
    states = HealthStates()
    states._states["x"] = EndpointHealth("suspect", False, None, "probe", "local", since=10.0)
    changed = states.apply(
        {
            "x": EndpointHealth("demoted", False, None, "probe", "older", since=5.0),
            "y": EndpointHealth("probation", False, 0.9, "probe", "recovering", since=1.0),
        }
    )
    assert changed == 1
    assert states.state("x") == "suspect"  # ours is newer
    assert states.state("y") == "probation" and states.get("y").score == 0.9
    states.apply({"x": EndpointHealth("demoted", True, None, "manual", "newer", since=11.0, operator_at=11.0)})
    assert states.state("x") == "demoted"
    assert states.apply({"x": EndpointHealth("demoted", True, None, "manual", "newer", since=11.0, operator_at=11.0)}) == 0


def test_an_operators_action_outranks_a_later_automatic_state_from_a_stale_view() -> None:
    pinned = EndpointHealth("demoted", True, None, "manual", "operator", since=10.0, operator_at=10.0)
    stale = EndpointHealth("suspect", False, None, "probe", "drift", since=12.0, operator_at=0.0)
    restored = EndpointHealth("healthy", False, None, "manual", "fixed", since=11.0, operator_at=11.0)
    later = EndpointHealth("suspect", False, None, "probe", "drift again", since=13.0, operator_at=11.0)
    # Whatever order they come in, every replica ends on the same state.
    for order in ([pinned, stale, restored, later], [stale, later, pinned, restored], [later, restored, stale, pinned]):
        states = HealthStates()
        for entry in order:
            states.apply({"x": entry})
        assert states.get("x") == later
    states = HealthStates()
    states.apply({"x": stale})
    states.apply({"x": pinned})
    assert states.get("x") == pinned


def test_set_score() -> None:
    states = HealthStates()
    states.set_score("x", 0.42)
    assert states.get("x").score == 0.42 and states.state("x") == "healthy"
