"""Probe runs and per-probe results, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Engine, delete, func, select

from gateway.persistence import probes
from gateway.persistence.models import probe_results, probe_runs


def test_run_with_results(engine: Engine) -> None:
    run_id = probes.start_run(engine, "p/m", "logprob-drift", at=100.0, trigger="manual")
    probes.add_results(
        engine,
        run_id,
        [
            probes.ProbeResult(
                "logprob_drift",
                "fail",
                samples=10,
                statistic=0.42,
                p_value=0.003,
                reference_samples=10,
                tokens_spent=200,
                details={"top_k": 20},
            ),
            probes.ProbeResult("loop_sentinel", "pass", samples=5, e_value=1.2, tokens_spent=50),
        ],
        at=101.0,
    )
    probes.finish_run(engine, run_id, "fail", at=102.0, tokens_spent=250, cost_usd=0.0003, details={"note": "drifted"})

    (run,) = probes.list_runs(engine)
    assert (run["id"], run["endpoint_id"], run["suite"], run["trigger"], run["verdict"]) == (
        run_id,
        "p/m",
        "logprob-drift",
        "manual",
        "fail",
    )
    assert run["finished_at"].timestamp() == 102.0 and run["tokens_spent"] == 250

    full = probes.get_run(engine, run_id)
    assert full is not None
    results = full["results"]
    assert [(r["probe"], r["verdict"], r["samples"]) for r in results] == [
        ("logprob_drift", "fail", 10),
        ("loop_sentinel", "pass", 5),
    ]
    assert results[0]["p_value"] == 0.003 and results[0]["statistic"] == 0.42 and results[0]["details"] == {"top_k": 20}
    assert results[1]["e_value"] == 1.2 and results[1]["p_value"] is None
    assert probes.get_run(engine, run_id + 1000) is None


def test_list_filters_and_orders(engine: Engine) -> None:
    a = probes.start_run(engine, "a", "s", at=1.0)
    b = probes.start_run(engine, "b", "s", at=2.0)
    c = probes.start_run(engine, "a", "s", at=3.0)
    assert [r["id"] for r in probes.list_runs(engine)] == [c, b, a]
    assert [r["id"] for r in probes.list_runs(engine, endpoint_id="a", limit=1)] == [c]
    assert probes.list_runs(engine)[0]["verdict"] is None  # still running


def test_deleting_a_run_deletes_its_results(engine: Engine) -> None:
    run_id = probes.start_run(engine, "a", "s", at=1.0)
    probes.add_results(engine, run_id, [probes.ProbeResult("x", "pass", samples=1)], at=1.0)
    with engine.begin() as conn:
        conn.execute(delete(probe_runs).where(probe_runs.c.id == run_id))
        assert conn.execute(select(func.count()).select_from(probe_results)).scalar_one() == 0
