"""Alembic, run programmatically with the config's database URL (`gwctl db upgrade|downgrade|current`).
The start-up check (`gwctl serve`) lives in `schema`, which does not import Alembic."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from gateway.persistence.schema import SchemaStatus, current_revisions, schema_problem

__all__ = ["MIGRATIONS", "SchemaStatus", "downgrade", "head_revisions", "schema_problem", "schema_status", "upgrade"]

# migrations/ sits beside the gateway package at the repository root.
MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine  # read by migrations/env.py
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(alembic_config(engine), revision)


def head_revisions() -> tuple[str, ...]:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return tuple(ScriptDirectory.from_config(cfg).get_heads())


def schema_status(engine: Engine) -> SchemaStatus:
    return SchemaStatus(current=current_revisions(engine), head=head_revisions())
