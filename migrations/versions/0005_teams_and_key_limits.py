"""Teams, and the limits a key or team can have: rpm, tpm, parallel requests, a budget per period,
allowed models, an expiry and metadata; a key belongs to an optional team.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Self-contained on purpose: a migration must not change when the app's models do.
Time = sa.DateTime(timezone=True)


def _limits() -> list[sa.Column]:
    return [
        sa.Column("max_parallel", sa.Integer()),
        sa.Column("budget_period", sa.String(16)),
        sa.Column("allowed_models", sa.JSON()),
        sa.Column("expires_at", Time),
        sa.Column("metadata", sa.JSON()),
    ]


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("rpm_limit", sa.Integer()),
        sa.Column("tpm_limit", sa.Integer()),
        sa.Column("budget_usd", sa.Double()),
        *_limits(),
        sa.Column("created_at", Time, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_teams"),
        sa.UniqueConstraint("name", name="uq_teams_name"),
    )
    with op.batch_alter_table("gateway_keys") as batch:
        batch.add_column(sa.Column("team_id", sa.Integer(), nullable=True))
        for column in _limits():
            batch.add_column(column)
        batch.add_column(sa.Column("rotated_at", Time))
        batch.create_foreign_key("fk_gateway_keys_team_id_teams", "teams", ["team_id"], ["id"])
        batch.create_index("ix_gateway_keys_team_id", ["team_id"])


def downgrade() -> None:
    with op.batch_alter_table("gateway_keys") as batch:
        batch.drop_index("ix_gateway_keys_team_id")
        batch.drop_constraint("fk_gateway_keys_team_id_teams", type_="foreignkey")
        for name in ("rotated_at", "metadata", "expires_at", "allowed_models", "budget_period", "max_parallel", "team_id"):
            batch.drop_column(name)
    op.drop_table("teams")
