"""Retention deletes old rows table by table, in small batches, and keeps the rest."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from gateway.persistence import probes
from gateway.persistence.config import RetentionConfig
from gateway.persistence.health import record_transition
from gateway.persistence.models import (
    health_transitions,
    manual_actions,
    probe_results,
    probe_runs,
    request_log,
    spend_daily,
)
from gateway.persistence.requests import write_batch
from gateway.persistence.retention import enforce
from kernel.health import Transition
from tests.gateway.persistence.factories import record

DAY = 86400.0
NOW = 1_770_000_000.0
NOON_OLD = NOW - 60 * DAY


def count(engine: Engine, table: object) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()  # type: ignore[arg-type]


def test_old_rows_go_in_batches(engine: Engine) -> None:
    write_batch(engine, [(NOON_OLD + i, record(f"old{i}")) for i in range(25)])
    write_batch(engine, [(NOW - DAY, record(f"new{i}")) for i in range(3)])
    old_run = probes.start_run(engine, "p/m", "s", at=NOW - 100 * DAY)
    probes.add_results(engine, old_run, [probes.ProbeResult("x", "pass", samples=1)], at=NOW - 100 * DAY)
    new_run = probes.start_run(engine, "p/m", "s", at=NOW)
    probes.add_results(engine, new_run, [probes.ProbeResult("x", "pass", samples=1)], at=NOW)
    for at in (NOW - 400 * DAY, NOW):
        record_transition(
            engine, Transition("p/m", "healthy", "demoted", "manual", "r", at), actor="a", action="demote"
        )

    sleeps: list[float] = []
    config = RetentionConfig(
        batch_size=10, pause=0.01, request_log_days=30, spend_days=30, probe_days=90, health_days=365
    )
    deleted = enforce(engine, config, now=NOW, sleep=sleeps.append)

    assert deleted["request_log"] == 25
    assert len(sleeps) >= 2  # 25 rows in batches of 10: paused between full batches
    assert count(engine, request_log) == 3
    assert count(engine, spend_daily) == 1  # the old day's row went, the recent one stayed
    assert deleted["probe_runs"] == 1 and count(engine, probe_runs) == 1 and count(engine, probe_results) == 1
    assert deleted["health_transitions"] == 1 and count(engine, health_transitions) == 1
    assert deleted["manual_actions"] == 1 and count(engine, manual_actions) == 1


def test_none_keeps_forever(engine: Engine) -> None:
    write_batch(engine, [(NOON_OLD, record("old"))])
    config = RetentionConfig(request_log_days=None, spend_days=None)
    deleted = enforce(engine, config, now=NOW, sleep=lambda s: None)
    assert "request_log" not in deleted and count(engine, request_log) == 1


def test_stop_interrupts_between_batches(engine: Engine) -> None:
    write_batch(engine, [(NOON_OLD + i, record(f"old{i}")) for i in range(30)])
    calls = iter([False, True])
    config = RetentionConfig(batch_size=10, request_log_days=30)
    enforce(engine, config, now=NOW, sleep=lambda s: None, stop=lambda: next(calls, True))
    assert count(engine, request_log) == 20  # one batch, then stopped
