"""Request log: the API the client spoke (`responses`, `messages`, ...), beside the operation routed;
and `stored_responses`, the durable copy of stored Responses API responses (`responses.durable`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # No backfill: an older row's API was its op's own, which readers take for NULL.
    with op.batch_alter_table("request_log") as batch:
        batch.add_column(sa.Column("api", sa.String(16), nullable=True))
    op.create_table(
        "stored_responses",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_stored_responses"),
        sa.UniqueConstraint("key", name="uq_stored_responses_key"),
    )
    op.create_index("ix_stored_responses_expires_at", "stored_responses", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_stored_responses_expires_at", table_name="stored_responses")
    op.drop_table("stored_responses")
    with op.batch_alter_table("request_log") as batch:
        batch.drop_column("api")
