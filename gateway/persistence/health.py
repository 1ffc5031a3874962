"""Health transitions (with reason and evidence), the current state of each endpoint, and the
manual actions of operators.

Every transition is logged; the current state takes it only when it orders after the stored one
(`gateway.health_states.order_key`), the rule the state store and every replica's `apply` follow,
so the database and the store cannot disagree about which of two states is the newer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, and_, insert, or_, select

from gateway.persistence.models import endpoint_states, health_transitions, manual_actions
from gateway.persistence.requests import upsert
from gateway.persistence.types import utc
from kernel.health import EndpointHealth, Transition


def record_transition(engine: Engine, t: Transition, *, actor: str | None = None, action: str | None = None) -> None:
    """Store a transition and the new current state; with `actor` and `action`, the manual action too."""
    at = utc(t.at)
    with engine.begin() as conn:
        conn.execute(
            insert(health_transitions).values(
                at=at,
                endpoint_id=t.endpoint_id,
                from_state=t.from_state,
                to_state=t.to_state,
                source=t.source,
                reason=t.reason,
                evidence=dict(t.evidence) if t.evidence is not None else None,
            )
        )
        state = {
            "state": t.to_state,
            "manual": t.manual,
            "score": t.score,
            "source": t.source,
            "reason": t.reason,
            "updated_at": at,
            "operator_at": t.operator_at,
        }
        stmt = upsert(conn, endpoint_states).values(endpoint_id=t.endpoint_id, **state)
        new, old = stmt.excluded, endpoint_states.c
        newer = or_(
            new.operator_at > old.operator_at,
            and_(new.operator_at == old.operator_at, new.updated_at >= old.updated_at),
        )
        conn.execute(stmt.on_conflict_do_update(index_elements=["endpoint_id"], set_=state, where=newer))
        if action is not None:
            conn.execute(
                insert(manual_actions).values(
                    at=at, actor=actor or "admin", action=action, endpoint_id=t.endpoint_id, reason=t.reason
                )
            )


def load_states(engine: Engine) -> dict[str, EndpointHealth]:
    with engine.connect() as conn:
        rows = conn.execute(select(endpoint_states)).mappings().all()
    return {
        r["endpoint_id"]: EndpointHealth(
            state=r["state"],
            manual=r["manual"],
            score=r["score"],
            source=r["source"],
            reason=r["reason"],
            since=r["updated_at"].timestamp(),
            operator_at=r["operator_at"],
        )
        for r in rows
    }


def list_transitions(engine: Engine, *, endpoint_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    q = select(health_transitions).order_by(health_transitions.c.at.desc(), health_transitions.c.id.desc()).limit(limit)
    if endpoint_id is not None:
        q = q.where(health_transitions.c.endpoint_id == endpoint_id)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def list_actions(engine: Engine, *, endpoint_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    q = select(manual_actions).order_by(manual_actions.c.at.desc(), manual_actions.c.id.desc()).limit(limit)
    if endpoint_id is not None:
        q = q.where(manual_actions.c.endpoint_id == endpoint_id)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]
