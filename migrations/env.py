"""Alembic environment. `gateway.persistence.migrate` passes the engine in `config.attributes`;
run from the command line (``alembic -c migrations/alembic.ini upgrade head``) it builds one from
the gateway's config (``GW_CONFIG`` / ``GW_DATABASE__URL``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from gateway.config import load_config
from gateway.persistence.engine import database_url, make_engine
from gateway.persistence.models import metadata


def _configure(**kwargs: object) -> None:
    context.configure(
        target_metadata=metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
        **kwargs,  # type: ignore[arg-type]
    )


def _run(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = context.config.attributes.get("engine")
    owned = engine is None
    if owned:
        engine = make_engine(load_config().database)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        if owned:
            engine.dispose()


def run_offline() -> None:
    _configure(url=database_url(load_config().database.url), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
