"""Health transitions, current endpoint states and manual actions, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Engine

from gateway.health_states import HealthStates
from gateway.persistence.health import list_actions, list_transitions, load_states, record_transition


async def test_transitions_states_and_actions(engine: Engine) -> None:
    states = HealthStates()
    t1 = await states.transition(
        "p/m",
        "suspect",
        source="probe",
        reason="logprob drift p=0.01",
        at=100.0,
        score=0.7,
        evidence={"p_value": 0.01, "samples": 10},
    )
    assert t1 is not None
    record_transition(engine, t1)
    t2 = await states.transition("p/m", "demoted", source="manual", reason="bad answers", at=200.0, operator=True)
    assert t2 is not None
    record_transition(engine, t2, actor="alice", action="demote")

    rows = list_transitions(engine)
    assert [(r["from_state"], r["to_state"], r["source"]) for r in rows] == [
        ("suspect", "demoted", "manual"),
        ("healthy", "suspect", "probe"),
    ]
    assert rows[1]["evidence"] == {"p_value": 0.01, "samples": 10}
    assert rows[1]["reason"] == "logprob drift p=0.01"
    assert rows[0]["at"].timestamp() == 200.0

    (action,) = list_actions(engine)
    assert (action["actor"], action["action"], action["endpoint_id"], action["reason"]) == (
        "alice",
        "demote",
        "p/m",
        "bad answers",
    )

    loaded = load_states(engine)
    assert loaded["p/m"].state == "demoted" and loaded["p/m"].manual and loaded["p/m"].score == 0.7
    assert loaded["p/m"].since == 200.0


async def test_filters_and_limits(engine: Engine) -> None:
    states = HealthStates()
    for i, ep in enumerate(["a", "b", "a"]):
        t = await states.transition(ep, "suspect" if i < 2 else "demoted", source="probe", reason=str(i), at=float(i))
        assert t is not None
        record_transition(engine, t)
    assert [r["reason"] for r in list_transitions(engine, endpoint_id="a")] == ["2", "0"]
    assert len(list_transitions(engine, limit=1)) == 1
    assert list_actions(engine) == []


async def test_another_replica_adopts_stored_states(engine: Engine) -> None:
    here, there = HealthStates(), HealthStates()
    t = await here.transition("p/m", "demoted", source="manual", reason="x", at=50.0, operator=True)
    assert t is not None
    record_transition(engine, t)
    assert there.apply(load_states(engine)) == 1
    assert there.get("p/m").state == "demoted" and there.get("p/m").manual
    restore = await here.transition("p/m", "healthy", source="manual", reason="fixed", at=60.0, operator=True)
    assert restore is not None
    record_transition(engine, restore)
    there.apply(load_states(engine))
    assert there.get("p/m").state == "healthy" and not there.get("p/m").manual


async def test_the_current_state_takes_only_a_state_that_orders_after_it(engine: Engine) -> None:
    here, there = HealthStates(), HealthStates()
    pin = await here.transition("p/m", "demoted", source="manual", reason="operator", at=100.0, operator=True)
    # Another replica's probe, later by the clock, decided on a view that had not seen the pin.
    stale = await there.transition("p/m", "suspect", source="probe", reason="drift", at=105.0)
    assert pin is not None and stale is not None
    record_transition(engine, pin)
    record_transition(engine, stale)
    assert [r["to_state"] for r in list_transitions(engine)] == ["suspect", "demoted"]  # both in the history
    loaded = load_states(engine)["p/m"]
    assert loaded == pin.entry() and loaded.operator_at == 100.0
    restore = await here.transition("p/m", "healthy", source="manual", reason="fixed", at=110.0, operator=True)
    assert restore is not None
    record_transition(engine, restore)
    record_transition(engine, pin)  # replayed late: older than the restore
    assert load_states(engine)["p/m"] == restore.entry()
    later = await here.transition("p/m", "suspect", source="probe", reason="drift again", at=120.0)
    assert later is not None and later.operator_at == 110.0
    record_transition(engine, later)
    assert load_states(engine)["p/m"] == later.entry()
