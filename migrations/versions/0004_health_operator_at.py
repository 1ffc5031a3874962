"""Endpoint states: when an operator last set each one, the first half of a state's order (a
restarted replica must not let an automatic state from a stale view outrank an operator's pin).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoint_states") as batch:
        batch.add_column(sa.Column("operator_at", sa.Double(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("endpoint_states") as batch:
        batch.drop_column("operator_at")
