"""`gwctl db` and `gwctl keys` against SQLite and PostgreSQL, and `gwctl serve` refusing an
outdated schema with one line that says what to run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.cli.gwctl import main
from gateway.persistence import keys
from gateway.persistence.config import DatabaseConfig
from gateway.persistence.engine import make_engine
from gateway.persistence.schema import SCHEMA_HEAD
from tests.gateway.persistence.conftest import PgDatabases

HEAD = ",".join(SCHEMA_HEAD)  # the newest migration (a test keeps it equal to Alembic's head)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def config_file(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'gateway.db'}"
    else:
        dbs: PgDatabases = request.getfixturevalue("pg_databases")
        url = dbs.create("gwcli")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "database": {"url": url, "connect_timeout": 2},
                "persistence": {"enabled": True, "spill_path": str(tmp_path / "spill.jsonl")},
                "auth": {"keys": [{"name": "from-config", "key": "sk-config-key-0001"}]},
            }
        )
    )
    yield path, url


def test_db_upgrade_current_downgrade(config_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = config_file
    assert main(["db", "current", "-c", str(path)]) == 1
    assert "outdated: run `gwctl db upgrade`" in capsys.readouterr().out
    assert main(["db", "upgrade", "-c", str(path)]) == 0
    assert f"is at {HEAD}" in capsys.readouterr().out
    assert main(["db", "current", "-c", str(path)]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["db", "downgrade", "base", "-c", str(path)]) == 0
    assert "empty (no schema)" in capsys.readouterr().out


def test_serve_refuses_an_outdated_schema(config_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = config_file
    assert main(["serve", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gwctl: the database schema at ") and err[-1].endswith(
        f"is outdated (empty, need {HEAD}): run `gwctl db upgrade`"
    )


def test_keys_create_list_revoke(config_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, url = config_file
    assert main(["db", "upgrade", "-c", str(path)]) == 0
    capsys.readouterr()

    assert main(["keys", "create", "alice", "--owner", "team-a", "--rpm", "60", "--budget", "20", "-c", str(path)]) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("sk-gw-") and "not shown again" in err
    engine = make_engine(DatabaseConfig(url=url))
    try:
        assert set(keys.load_keys(engine).active.values()) == {"alice"}
    finally:
        engine.dispose()

    assert main(["keys", "list", "-c", str(path)]) == 0
    table = capsys.readouterr().out
    assert "alice" in table and "team-a" in table and "active" in table and secret not in table
    assert main(["keys", "create", "alice", "-c", str(path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["keys", "create", "from-config", "-c", str(path)]) == 2
    assert "already a key name in the config" in capsys.readouterr().err

    assert main(["keys", "revoke", "alice", "-c", str(path)]) == 0
    capsys.readouterr()
    assert main(["keys", "revoke", "alice", "-c", str(path)]) == 2
    assert "already revoked" in capsys.readouterr().err
    assert main(["keys", "list", "--json", "-c", str(path)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "alice" and row["revoked_at"] is not None and row["rpm_limit"] == 60


def test_keys_without_a_schema_say_what_to_run(
    config_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = config_file
    assert main(["keys", "list", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "did you run `gwctl db upgrade`?" in err and len(err.strip().splitlines()) == 1
