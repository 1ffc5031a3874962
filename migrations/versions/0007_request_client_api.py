"""Request log: the API the client spoke (`responses`, `messages`, ...), beside the operation routed.

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


def upgrade() -> None:
    # No backfill: an older row's API was its op's own, which readers take for NULL.
    with op.batch_alter_table("request_log") as batch:
        batch.add_column(sa.Column("api", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("request_log") as batch:
        batch.drop_column("api")
