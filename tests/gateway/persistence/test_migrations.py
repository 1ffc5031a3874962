"""The migration suite on SQLite and PostgreSQL: upgrade to head, the schema equals the models,
downgrade to base leaves nothing; and the start-up check's one-line verdicts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.models import metadata
from gateway.persistence.schema import SCHEMA_HEAD
from tests.gateway.persistence.conftest import PgDatabases

TABLES = {t.name for t in metadata.sorted_tables}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, DatabaseConfig]]:
    """An empty database (a new one for each test)."""
    if request.param == "sqlite":
        config = DatabaseConfig(url=f"sqlite:///{tmp_path / 'gateway.db'}")
    else:
        dbs: PgDatabases = request.getfixturevalue("pg_databases")
        config = DatabaseConfig(url=dbs.create("gwmig"))
    engine = make_engine(config)
    try:
        yield engine, config
    finally:
        engine.dispose()


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_then_downgrade(empty: tuple[Engine, DatabaseConfig]) -> None:
    engine, _ = empty
    assert migrate.schema_status(engine).current == ()

    migrate.upgrade(engine)
    assert tables(engine) == TABLES | {"alembic_version"}
    assert migrate.schema_status(engine).up_to_date

    migrate.downgrade(engine, "base")
    assert tables(engine) == {"alembic_version"}
    assert migrate.schema_status(engine).current == ()

    migrate.upgrade(engine)  # and back up again, from base
    assert tables(engine) == TABLES | {"alembic_version"}


def test_migrations_create_exactly_the_models(empty: tuple[Engine, DatabaseConfig]) -> None:
    engine, _ = empty
    migrate.upgrade(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []


def test_upgrade_twice_is_a_no_op(empty: tuple[Engine, DatabaseConfig]) -> None:
    engine, _ = empty
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert migrate.schema_status(engine).up_to_date


def test_schema_problem_names_the_command(empty: tuple[Engine, DatabaseConfig]) -> None:
    engine, config = empty
    problem = migrate.schema_problem(config)
    assert problem is not None and "\n" not in problem
    assert "outdated" in problem and "run `gwctl db upgrade`" in problem

    migrate.upgrade(engine)
    assert migrate.schema_problem(config) is None

    migrate.downgrade(engine, "base")
    assert "run `gwctl db upgrade`" in (migrate.schema_problem(config) or "")


def test_schema_problem_when_the_database_is_unreachable() -> None:
    problem = migrate.schema_problem(DatabaseConfig(url="postgresql://postgres@127.0.0.1:1/nope", connect_timeout=1))
    assert problem is not None and "\n" not in problem
    assert problem.startswith("cannot reach the database at postgresql+psycopg://postgres@127.0.0.1:1/nope")


def test_head_is_a_single_revision() -> None:
    assert len(migrate.head_revisions()) == 1


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    engine = make_engine(DatabaseConfig(url=f"sqlite:///{tmp_path / 'sub' / 'gateway.db'}"))
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_the_start_up_check_knows_the_newest_migration() -> None:
    assert SCHEMA_HEAD == migrate.head_revisions()  # bump schema.SCHEMA_HEAD with every new revision


def test_the_start_up_check_does_not_load_alembic() -> None:
    code = (
        "import sys; from gateway.cli.serve import check_schema; from gateway.persistence import schema; "
        "print('alembic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_0006_adds_regions_and_data_policy_to_existing_keys_and_teams(empty: tuple[Engine, DatabaseConfig]) -> None:
    """Rows written before 0006 keep working after it (no policy: NULL), and 0006's downgrade
    gives the columns back without touching the rows."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    engine, _ = empty
    migrate.upgrade(engine, "0005")
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO teams (id, name, created_at) VALUES (1, 'eng', :now)"), {"now": now})
        conn.execute(
            text("INSERT INTO gateway_keys (name, digest, prefix, created_at, team_id) VALUES ('k', :d, 'sk-gw-ab', :now, 1)"),
            {"d": "0" * 64, "now": now},
        )
    migrate.upgrade(engine)
    columns = {c["name"] for c in inspect(engine).get_columns("gateway_keys")}
    assert {"allowed_regions", "data_collection"} <= columns
    assert {"allowed_regions", "data_collection"} <= {c["name"] for c in inspect(engine).get_columns("teams")}
    with engine.begin() as conn:
        assert conn.execute(text("SELECT allowed_regions, data_collection FROM gateway_keys")).one() == (None, None)
        conn.execute(text("UPDATE teams SET data_collection = 'deny'"))
    migrate.downgrade(engine, "0005")
    assert "allowed_regions" not in {c["name"] for c in inspect(engine).get_columns("gateway_keys")}
    assert "data_collection" not in {c["name"] for c in inspect(engine).get_columns("teams")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT name, team_id FROM gateway_keys")).one() == ("k", 1)
