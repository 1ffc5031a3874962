"""Engine set-up: a SQLite database file (and its WAL files) is created 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from gateway.config import DatabaseConfig
from gateway.persistence import migrate
from gateway.persistence.engine import make_engine


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
