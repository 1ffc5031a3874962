"""Engine set-up: PostgreSQL sessions carry a statement timeout and TCP settings that bound a
half-open connection, so no database call can block a gateway thread for good."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from gateway.config import DatabaseConfig
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
