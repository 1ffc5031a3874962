"""Probe baselines in the database, on SQLite and PostgreSQL: the repository functions and the
async `SqlBaselines` store that probes use."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from gateway.persistence.baselines import SqlBaselines, clear_baselines, get_baseline, put_baseline
from gateway.persistence.engine import Database
from gateway.persistence.models import probe_baselines


def test_put_get_replace(engine: Engine) -> None:
    assert get_baseline(engine, "p/m", "logprob_drift", "golden") is None
    put_baseline(engine, "p/m", "logprob_drift", "golden", {"window": [[-0.1, -2.3]], "n": 10}, at=100.0)
    assert get_baseline(engine, "p/m", "logprob_drift", "golden") == {"window": [[-0.1, -2.3]], "n": 10}
    put_baseline(engine, "p/m", "logprob_drift", "golden", {"n": 50}, at=200.0)  # a declared rebaseline
    assert get_baseline(engine, "p/m", "logprob_drift", "golden") == {"n": 50}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(probe_baselines)).scalar_one() == 1


def test_keys_are_per_endpoint_probe_and_key(engine: Engine) -> None:
    put_baseline(engine, "p/m", "logprob_drift", "golden", {"a": 1}, at=1.0)
    put_baseline(engine, "p/m", "logprob_drift", "reference", {"a": 2}, at=1.0)
    put_baseline(engine, "p/m", "distribution", "golden", {"a": 3}, at=1.0)
    put_baseline(engine, "q/m", "logprob_drift", "golden", {"a": 4}, at=1.0)
    assert get_baseline(engine, "p/m", "distribution", "golden") == {"a": 3}
    assert clear_baselines(engine, "p/m", "logprob_drift") == 2
    assert get_baseline(engine, "p/m", "logprob_drift", "golden") is None
    assert clear_baselines(engine, "p/m") == 1
    assert get_baseline(engine, "q/m", "logprob_drift", "golden") == {"a": 4}


async def test_sql_store_runs_off_the_loop(engine: Engine) -> None:
    db = Database(engine)
    store = SqlBaselines(db)
    await store.put("p/m", "fidelity", "golden", {"counts": {"a": 3}}, at=5.0)
    assert await store.get("p/m", "fidelity", "golden") == {"counts": {"a": 3}}
    assert await store.clear("p/m") == 1
    assert await store.get("p/m", "fidelity", "golden") is None
    db._pool.shutdown(wait=True)  # the engine belongs to the fixture: close only the pool
