"""Persistence's configuration slices: the database, the record writer, retention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import Field, field_validator

from kernel.frozen import Frozen
from providers.engines.config import EngineConfig
from providers.settings import ProviderConfig


class DatabaseConfig(Frozen):
    """Where persistence lives: SQLite (a file, WAL mode) by default, PostgreSQL in production
    (``postgresql+psycopg://user@host:5432/db``; a plain ``postgresql://`` URL means psycopg 3)."""

    url: str = "sqlite:///./gateway.db"
    connect_timeout: float = Field(5.0, gt=0)
    pool_size: int = Field(5, ge=1, le=100)
    # PostgreSQL's statement_timeout for the gateway's sessions, and (with connect_timeout) how long
    # an unacknowledged send may wait on a half-open connection (tcp_user_timeout).
    statement_timeout: float = Field(30.0, gt=0)

    @field_validator("url")
    @classmethod
    def _dialect(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "sqlite+pysqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("must be a sqlite:/// or postgresql:// URL")
        return v


class PersistenceConfig(Frozen):
    """Request records go to a bounded queue that a background writer drains in batches; past the
    bound they spill to an append-only file, replayed when the database answers again."""

    enabled: bool = False
    # Where the database writes run: a worker process (the gateway's own process then does no
    # database work and its event loop never shares the GIL with it), or a thread.
    writer: Literal["process", "thread"] = "process"
    queue_size: int = Field(10_000, ge=1)
    batch_size: int = Field(500, ge=1, le=10_000)
    flush_interval: float = Field(0.5, gt=0)
    # One spill file per gateway process (replicas on one host need their own paths); a restarted
    # process replays what its predecessor left there.
    spill_path: str = "./gateway-spill.jsonl"
    spill_max_bytes: int = Field(256 * 1024 * 1024, ge=0)
    retry_initial: float = Field(0.5, gt=0)
    retry_max: float = Field(10.0, gt=0)
    # Keep prompt and response bodies in the request log (off: metadata only).
    store_bodies: bool = False
    # How often each replica re-reads gateway keys and manual endpoint states from the database.
    refresh_interval: float = Field(5.0, gt=0)
    # A refresh that has not answered by then counts as failed (the next round tries again).
    refresh_timeout: float = Field(10.0, gt=0)
    shutdown_timeout: float = Field(10.0, gt=0)
    # A batch write or a refresh that takes longer counts as the database being down (retried).
    write_timeout: float = Field(30.0, gt=0)


class RetentionConfig(Frozen):
    """Days to keep each table's rows (None: forever), enforced by a periodic job in small batches."""

    interval: float = Field(3600.0, gt=0)
    batch_size: int = Field(2000, ge=1)
    pause: float = Field(0.05, ge=0)
    request_log_days: float | None = Field(30.0, gt=0)
    spend_days: float | None = Field(400.0, gt=0)
    probe_days: float | None = Field(90.0, gt=0)
    health_days: float | None = Field(365.0, gt=0)
    manual_action_days: float | None = Field(365.0, gt=0)
    config_history_days: float | None = Field(365.0, gt=0)


class PersistenceSettings(Protocol):
    """The slices of `gateway.config.Settings` that persistence reads (the catalog sync stores the
    configured providers and engines)."""

    @property
    def database(self) -> DatabaseConfig: ...

    @property
    def persistence(self) -> PersistenceConfig: ...

    @property
    def retention(self) -> RetentionConfig: ...

    @property
    def providers(self) -> Sequence[ProviderConfig]: ...

    @property
    def engines(self) -> Sequence[EngineConfig]: ...
