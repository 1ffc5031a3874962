"""The start-up schema check, without Alembic: `gwctl serve` must not load the migration machinery
into the serving process (its objects lengthen every full garbage collection). `SCHEMA_HEAD` names
the newest migration; a test keeps it equal to Alembic's head."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine, safe_url

SCHEMA_HEAD = ("0007",)


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: tuple[str, ...]
    head: tuple[str, ...] = SCHEMA_HEAD

    @property
    def up_to_date(self) -> bool:
        return set(self.current) == set(self.head)


def current_revisions(engine: Engine) -> tuple[str, ...]:
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return ()
        return tuple(sorted(conn.execute(text("SELECT version_num FROM alembic_version")).scalars()))


def schema_status(engine: Engine) -> SchemaStatus:
    return SchemaStatus(current=current_revisions(engine))


def schema_problem(config: DatabaseConfig) -> str | None:
    """None when the schema is current, else one line saying what is wrong and what to run."""
    engine = make_engine(config)
    try:
        status = schema_status(engine)
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None)
        reason = str(orig if orig is not None else exc).strip().splitlines()[0]
        return f"cannot reach the database at {safe_url(config.url)}: {reason}"
    finally:
        engine.dispose()
    if status.up_to_date:
        return None
    where = ",".join(status.current) or "empty"
    return (
        f"the database schema at {safe_url(config.url)} is outdated ({where}, need {','.join(status.head)}):"
        " run `gwctl db upgrade`"
    )
