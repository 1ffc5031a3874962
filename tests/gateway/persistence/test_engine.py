"""Engine set-up: PostgreSQL sessions carry a statement timeout and TCP settings that bound a
half-open connection, so no database call can block a gateway thread for good; a SQLite database
file (and its WAL files) is created 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from gateway.persistence import migrate
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine, postgres_connect_args


def test_postgres_connect_args_bound_every_wait() -> None:
    args = postgres_connect_args(DatabaseConfig(url="postgresql://u@h/db", statement_timeout=2.5, connect_timeout=4))
    assert "-c statement_timeout=2500" in args["options"]
    assert args["tcp_user_timeout"] == 2500 + 4000 and args["keepalives"] == 1
    assert args["connect_timeout"] == 4


@pytest.mark.services
def test_a_statement_past_the_timeout_is_cancelled_by_the_server(pg_url: str) -> None:
    engine = make_engine(DatabaseConfig(url=pg_url, statement_timeout=0.3))
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError, match="statement timeout"):
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_sleep(5)"))
        assert time.monotonic() - started < 4  # well short of the 5 s it asked for
    finally:
        engine.dispose()



@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_sqlite_database_is_private(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "sub" / "gateway.db"
    engine = make_engine(DatabaseConfig(url=f"sqlite:///{path}"))
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO gateway_keys (name, digest, prefix, created_at) VALUES ('a', 'd', 'p', '2026-01-01')")
            )
            files = [p for p in path.parent.iterdir() if p.name.startswith("gateway.db")]
            assert {p.name for p in files} >= {"gateway.db", "gateway.db-wal"}
            for p in files:
                assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name
    finally:
        engine.dispose()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    path.touch(mode=0o640)
    os.chmod(path, 0o640)  # the operator's choice
    make_engine(DatabaseConfig(url=f"sqlite:///{path}")).dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
