"""Fixtures for the persistence tests: a migrated database on SQLite (a temp file) and on the real
PostgreSQL server (a fresh database per test module, dropped afterwards), as one parametrised
fixture, so every repository test runs on both."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine, delete

from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.models import metadata
from tests.services import require

# The server CI and scripts/services.sh bring up; override with GW_TEST_PG (a libpq URL).
PG_ADMIN = os.environ.get("GW_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def pg_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


class PgDatabases:
    """Creates throwaway databases on the server and drops them (even with open connections)."""

    def __init__(self, admin_url: str = PG_ADMIN) -> None:
        self._admin = admin_url
        self.created: list[str] = []

    def create(self, prefix: str = "gwtest") -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        info = psycopg.conninfo.conninfo_to_dict(self._admin)
        host, port, user = info.get("host", "127.0.0.1"), info.get("port", "5432"), info.get("user", "postgres")
        return f"postgresql+psycopg://{user}@{host}:{port}/{name}"

    def drop_all(self) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            for name in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()


@pytest.fixture(scope="module")
def pg_databases() -> Iterator[PgDatabases]:
    require(pg_available(), f"PostgreSQL is not answering at {PG_ADMIN} (scripts/test.sh starts it, creates the database)")
    dbs = PgDatabases()
    try:
        yield dbs
    finally:
        dbs.drop_all()


@pytest.fixture(scope="module")
def pg_url(pg_databases: PgDatabases) -> str:
    """A fresh, empty PostgreSQL database for this test module."""
    return pg_databases.create()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A database at the newest schema, one per backend per module."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'gateway.db'}"
    else:
        url = request.getfixturevalue("pg_url")
    engine = make_engine(DatabaseConfig(url=url))
    migrate.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def engine(migrated: Engine) -> Iterator[Engine]:
    """The module's migrated database, emptied after each test."""
    yield migrated
    with migrated.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(delete(table))
