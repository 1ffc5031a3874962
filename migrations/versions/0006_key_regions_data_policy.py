"""Where a key's or a team's requests may go: allowed endpoint regions (names or fnmatch
patterns) and a data-collection policy ("deny": never a provider that may keep prompts).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES = ("teams", "gateway_keys")


COLUMNS = ("allowed_regions", "data_collection")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("allowed_regions", sa.JSON()))
        op.add_column(table, sa.Column("data_collection", sa.String(8)))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in TABLES:
        for column in reversed(COLUMNS):
            if sqlite:
                # Not a batch copy: recreating `teams` drops a table its keys' rows reference.
                op.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            else:
                op.drop_column(table, column)
