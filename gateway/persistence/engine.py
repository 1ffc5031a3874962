"""Engine set-up for SQLite (a file in WAL mode) and PostgreSQL (psycopg 3), and `Database`:
an engine plus the threads that run its blocking calls, so the event loop never waits on I/O."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from gateway.persistence.config import DatabaseConfig
from kernel.redact import mask_urls

T = TypeVar("T")


def database_url(raw: str) -> URL:
    """The SQLAlchemy URL; ``postgresql://`` means psycopg 3 (the driver this project ships)."""
    url = make_url(raw)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url


def safe_url(raw: str) -> str:
    """The URL for messages and logs, without its password (nor one in its query string)."""
    return mask_urls(database_url(raw).render_as_string(hide_password=True))


def make_engine(config: DatabaseConfig) -> Engine:
    url = database_url(config.url)
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, config)
    return create_engine(
        url,
        pool_size=config.pool_size,
        max_overflow=config.pool_size,
        pool_pre_ping=True,
        pool_recycle=1800,
        pool_timeout=config.connect_timeout,
        connect_args=postgres_connect_args(config),
    )


def postgres_connect_args(config: DatabaseConfig) -> dict[str, Any]:
    """libpq settings that bound every wait: a statement (server side), and a half-open
    connection (unacknowledged data, idle keepalives), which would otherwise block a thread for good."""
    statement_ms = max(1, round(config.statement_timeout * 1000))
    return {
        "connect_timeout": max(1, round(config.connect_timeout)),
        "options": f"-c statement_timeout={statement_ms} -c idle_in_transaction_session_timeout={statement_ms * 2}",
        "tcp_user_timeout": statement_ms + max(1000, round(config.connect_timeout * 1000)),
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }


def _sqlite_engine(url: URL, config: DatabaseConfig) -> Engine:
    if url.database and url.database != ":memory:":
        path = Path(url.database).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Created 0600 before SQLite opens it (its -wal and -shm files take the same mode). Only
        # when new: closing any descriptor of an open database drops this process's locks on it.
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
    engine = create_engine(
        url,
        pool_size=config.pool_size,
        max_overflow=config.pool_size,
        pool_timeout=config.connect_timeout,
        connect_args={"timeout": config.connect_timeout, "check_same_thread": False},
    )
    busy_ms = int(config.connect_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()

    return engine


class Database:
    """An engine and a small thread pool: ``await db.run(fn, *args, **kw)`` calls ``fn(engine, *args, **kw)``
    off the event loop. Writes have their own single thread (see `writer`), so reads never queue
    behind a slow batch."""

    def __init__(self, engine: Engine, *, threads: int = 2) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gateway-db")

    @classmethod
    def from_config(cls, config: DatabaseConfig) -> Database:
        return cls(make_engine(config))

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        call = partial(fn, self.engine, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.engine.dispose()
