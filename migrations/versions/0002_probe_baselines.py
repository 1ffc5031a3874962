"""Probe baselines: frozen golden windows and reference self-runs per (endpoint, probe, key).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Self-contained on purpose: a migration must not change when the app's models do.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Time = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "probe_baselines",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("endpoint_id", sa.String(256), nullable=False),
        sa.Column("probe", sa.String(64), nullable=False),
        sa.Column("key", sa.String(256), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", Time, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_probe_baselines"),
        sa.UniqueConstraint("endpoint_id", "probe", "key", name="uq_probe_baselines_endpoint_id_probe_key"),
    )


def downgrade() -> None:
    op.drop_table("probe_baselines")
