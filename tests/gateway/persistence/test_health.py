"""Health transitions, current endpoint states and manual actions, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Engine

from gateway.health_states import HealthStates
from gateway.persistence.health import list_actions, list_transitions, load_states, record_transition


def test_transitions_states_and_actions(engine: Engine) -> None:
    states = HealthStates()
    t1 = states.transition(
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
    t2 = states.transition("p/m", "demoted", source="manual", reason="bad answers", at=200.0, operator=True)
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


def test_filters_and_limits(engine: Engine) -> None:
    states = HealthStates()
    for i, ep in enumerate(["a", "b", "a"]):
        t = states.transition(ep, "suspect" if i < 2 else "demoted", source="probe", reason=str(i), at=float(i))
        assert t is not None
        record_transition(engine, t)
    assert [r["reason"] for r in list_transitions(engine, endpoint_id="a")] == ["2", "0"]
    assert len(list_transitions(engine, limit=1)) == 1
    assert list_actions(engine) == []


def test_another_replica_adopts_stored_states(engine: Engine) -> None:
    here, there = HealthStates(), HealthStates()
    t = here.transition("p/m", "demoted", source="manual", reason="x", at=50.0, operator=True)
    assert t is not None
    record_transition(engine, t)
    assert there.apply(load_states(engine)) == 1
    assert there.get("p/m").state == "demoted" and there.get("p/m").manual
    restore = here.transition("p/m", "healthy", source="manual", reason="fixed", at=60.0, operator=True)
    assert restore is not None
    record_transition(engine, restore)
    there.apply(load_states(engine))
    assert there.get("p/m").state == "healthy" and not there.get("p/m").manual
