"""Initial schema: keys, providers and deployments with history, request log, spend per key and day,
probe runs and results, health transitions and current states, manual actions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Self-contained on purpose: a migration must not change when the app's models do.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Time = sa.DateTime(timezone=True)


def _id() -> sa.Column:
    return sa.Column("id", BigId, autoincrement=True, nullable=False)


def upgrade() -> None:
    op.create_table(
        "gateway_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(256)),
        sa.Column("rpm_limit", sa.Integer()),
        sa.Column("tpm_limit", sa.Integer()),
        sa.Column("budget_usd", sa.Double()),
        sa.Column("created_at", Time, nullable=False),
        sa.Column("revoked_at", Time),
        sa.PrimaryKeyConstraint("id", name="pk_gateway_keys"),
        sa.UniqueConstraint("digest", name="uq_gateway_keys_digest"),
        sa.UniqueConstraint("name", name="uq_gateway_keys_name"),
    )
    for table, key in (("providers", "name"), ("deployments", "endpoint_id")):
        extra = (
            [sa.Column("model", sa.String(256), nullable=False), sa.Column("provider", sa.String(128), nullable=False)]
            if table == "deployments"
            else [sa.Column("kind", sa.String(64), nullable=False)]
        )
        op.create_table(
            table,
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column(key, sa.String(256 if key == "endpoint_id" else 128), nullable=False),
            *extra,
            sa.Column("config", sa.JSON(), nullable=False),
            sa.Column("config_hash", sa.String(64), nullable=False),
            sa.Column("first_seen", Time, nullable=False),
            sa.Column("last_seen", Time, nullable=False),
            sa.Column("removed_at", Time),
            sa.PrimaryKeyConstraint("id", name=f"pk_{table}"),
            sa.UniqueConstraint(key, name=f"uq_{table}_{key}"),
        )
    op.create_table(
        "config_history",
        _id(),
        sa.Column("at", Time, nullable=False),
        sa.Column("entity", sa.String(16), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_config_history"),
    )
    op.create_index("ix_config_history_at", "config_history", ["at"])
    op.create_index("ix_config_history_entity_name_at", "config_history", ["entity", "name", "at"])

    op.create_table(
        "request_log",
        _id(),
        sa.Column("at", Time, nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("key_name", sa.String(128)),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("endpoint_id", sa.String(256)),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(64)),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("ttft_ms", sa.Double()),
        sa.Column("latency_ms", sa.Double(), nullable=False),
        sa.Column("overhead_ms", sa.Double(), nullable=False),
        sa.Column("request_body", sa.Text()),
        sa.Column("response_body", sa.Text()),
        sa.PrimaryKeyConstraint("id", name="pk_request_log"),
    )
    op.create_index("ix_request_log_at", "request_log", ["at"])
    op.create_index("ix_request_log_request_id", "request_log", ["request_id"])
    op.create_index("ix_request_log_endpoint_id_at", "request_log", ["endpoint_id", "at"])
    op.create_index("ix_request_log_key_name_at", "request_log", ["key_name", "at"])

    op.create_table(
        "spend_daily",
        _id(),
        sa.Column("key_name", sa.String(128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_spend_daily"),
        sa.UniqueConstraint("key_name", "day", name="uq_spend_daily_key_name_day"),
    )
    op.create_index("ix_spend_daily_day", "spend_daily", ["day"])

    op.create_table(
        "probe_runs",
        _id(),
        sa.Column("endpoint_id", sa.String(256), nullable=False),
        sa.Column("suite", sa.String(64), nullable=False),
        sa.Column("trigger", sa.String(32), nullable=False),
        sa.Column("started_at", Time, nullable=False),
        sa.Column("finished_at", Time),
        sa.Column("verdict", sa.String(32)),
        sa.Column("tokens_spent", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("details", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_probe_runs"),
    )
    op.create_index("ix_probe_runs_started_at", "probe_runs", ["started_at"])
    op.create_index("ix_probe_runs_endpoint_id_started_at", "probe_runs", ["endpoint_id", "started_at"])

    op.create_table(
        "probe_results",
        _id(),
        sa.Column("run_id", sa.BigInteger(), nullable=False),
        sa.Column("at", Time, nullable=False),
        sa.Column("probe", sa.String(64), nullable=False),
        sa.Column("statistic", sa.Double()),
        sa.Column("p_value", sa.Double()),
        sa.Column("e_value", sa.Double()),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("reference_samples", sa.Integer()),
        sa.Column("tokens_spent", sa.BigInteger(), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("details", sa.JSON()),
        sa.ForeignKeyConstraint(
            ["run_id"], ["probe_runs.id"], name="fk_probe_results_run_id_probe_runs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_probe_results"),
    )
    op.create_index("ix_probe_results_at", "probe_results", ["at"])
    op.create_index("ix_probe_results_run_id", "probe_results", ["run_id"])

    op.create_table(
        "health_transitions",
        _id(),
        sa.Column("at", Time, nullable=False),
        sa.Column("endpoint_id", sa.String(256), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_health_transitions"),
    )
    op.create_index("ix_health_transitions_at", "health_transitions", ["at"])
    op.create_index("ix_health_transitions_endpoint_id_at", "health_transitions", ["endpoint_id", "at"])

    op.create_table(
        "endpoint_states",
        sa.Column("endpoint_id", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("manual", sa.Boolean(), nullable=False),
        sa.Column("score", sa.Double()),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", Time, nullable=False),
        sa.PrimaryKeyConstraint("endpoint_id", name="pk_endpoint_states"),
    )

    op.create_table(
        "manual_actions",
        _id(),
        sa.Column("at", Time, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("endpoint_id", sa.String(256), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_manual_actions"),
    )
    op.create_index("ix_manual_actions_at", "manual_actions", ["at"])


def downgrade() -> None:
    for table in (
        "manual_actions",
        "endpoint_states",
        "health_transitions",
        "probe_results",
        "probe_runs",
        "spend_daily",
        "request_log",
        "config_history",
        "deployments",
        "providers",
        "gateway_keys",
    ):
        op.drop_table(table)  # drops its indexes too
