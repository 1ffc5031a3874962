"""Probe runs and their per-probe results (statistic, p-value or e-value, sample counts, tokens
spent, verdict). The probe scheduler writes them; the admin API reads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, insert, select, update

from gateway.persistence.models import probe_results, probe_runs
from gateway.persistence.types import utc
from probes.base import ProbeResult

__all__ = ["ProbeResult", "add_results", "finish_run", "get_run", "list_runs", "start_run"]


def start_run(engine: Engine, endpoint_id: str, suite: str, *, at: float, trigger: str = "schedule") -> int:
    with engine.begin() as conn:
        result = conn.execute(
            insert(probe_runs)
            .values(
                endpoint_id=endpoint_id, suite=suite, trigger=trigger, started_at=utc(at), tokens_spent=0, cost_usd=0.0
            )
            .returning(probe_runs.c.id)
        )
        return int(result.scalar_one())


def add_results(engine: Engine, run_id: int, results: Sequence[ProbeResult], *, at: float) -> None:
    if not results:
        return
    rows = [
        {
            "run_id": run_id,
            "at": utc(at),
            "probe": r.probe,
            "statistic": r.statistic,
            "p_value": r.p_value,
            "e_value": r.e_value,
            "samples": r.samples,
            "reference_samples": r.reference_samples,
            "tokens_spent": r.tokens_spent,
            "verdict": r.verdict,
            "details": dict(r.details) if r.details is not None else None,
        }
        for r in results
    ]
    with engine.begin() as conn:
        conn.execute(insert(probe_results), rows)


def finish_run(
    engine: Engine,
    run_id: int,
    verdict: str,
    *,
    at: float,
    tokens_spent: int = 0,
    cost_usd: float = 0.0,
    details: Mapping[str, Any] | None = None,
) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(probe_runs)
            .where(probe_runs.c.id == run_id)
            .values(
                finished_at=utc(at),
                verdict=verdict,
                tokens_spent=tokens_spent,
                cost_usd=cost_usd,
                details=dict(details) if details is not None else None,
            )
        )


def list_runs(engine: Engine, *, endpoint_id: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    q = select(probe_runs).order_by(probe_runs.c.started_at.desc(), probe_runs.c.id.desc()).limit(limit)
    if endpoint_id is not None:
        q = q.where(probe_runs.c.endpoint_id == endpoint_id)
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(q).mappings()]


def get_run(engine: Engine, run_id: int) -> dict[str, Any] | None:
    with engine.connect() as conn:
        run = conn.execute(select(probe_runs).where(probe_runs.c.id == run_id)).mappings().first()
        if run is None:
            return None
        results = conn.execute(
            select(probe_results).where(probe_results.c.run_id == run_id).order_by(probe_results.c.id)
        ).mappings()
        return {**dict(run), "results": [dict(r) for r in results]}
