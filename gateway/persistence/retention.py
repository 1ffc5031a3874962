"""Retention: rows older than each table's limit are deleted by a periodic job, a small batch per
transaction with a pause between batches, so no table is locked for long."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Column, Engine, Table, delete, select

from gateway.persistence.config import RetentionConfig
from gateway.persistence.models import (
    config_history,
    health_transitions,
    manual_actions,
    probe_results,
    probe_runs,
    request_log,
    spend_daily,
    stored_responses,
)
from gateway.persistence.types import utc


@dataclass(frozen=True, slots=True)
class Rule:
    table: Table
    column: Column  # type: ignore[type-arg]
    days: float | None


def rules(config: RetentionConfig) -> list[Rule]:
    # Probe results go before their runs (and cascade with them anyway).
    return [
        Rule(request_log, request_log.c.at, config.request_log_days),
        Rule(spend_daily, spend_daily.c.day, config.spend_days),
        Rule(probe_results, probe_results.c.at, config.probe_days),
        Rule(probe_runs, probe_runs.c.started_at, config.probe_days),
        Rule(health_transitions, health_transitions.c.at, config.health_days),
        Rule(manual_actions, manual_actions.c.at, config.manual_action_days),
        Rule(config_history, config_history.c.at, config.config_history_days),
        # Archived responses past their TTL (never returned; removed here).
        Rule(stored_responses, stored_responses.c.expires_at, 0.0),
    ]


def delete_older(engine: Engine, rule: Rule, cutoff: float, batch_size: int) -> int:
    """Delete one batch of rows older than `cutoff`; returns how many went."""
    bound = utc(cutoff)
    limit = bound.date() if rule.column is spend_daily.c.day else bound
    ids = select(rule.table.c.id).where(rule.column < limit).order_by(rule.table.c.id).limit(batch_size)
    with engine.begin() as conn:
        return conn.execute(delete(rule.table).where(rule.table.c.id.in_(ids.scalar_subquery()))).rowcount


def enforce(
    engine: Engine,
    config: RetentionConfig,
    *,
    now: float,
    sleep: Callable[[float], None] = time.sleep,
    stop: Callable[[], bool] = lambda: False,
) -> dict[str, int]:
    """One pass over every table; returns rows deleted per table. Runs in a worker thread."""
    deleted: dict[str, int] = {}
    for rule in rules(config):
        if rule.days is None:
            continue
        cutoff = now - timedelta(days=rule.days).total_seconds()
        total = 0
        while not stop():
            n = delete_older(engine, rule, cutoff, config.batch_size)
            total += n
            if n < config.batch_size:
                break
            sleep(config.pause)
        deleted[rule.table.name] = total
    return deleted
