"""`gwctl db upgrade|downgrade|current`: run the Alembic migrations against the config's database."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.config import load_config
from gateway.persistence import migrate
from gateway.persistence.engine import make_engine, safe_url


def add_parser(sub: Any) -> None:
    p = sub.add_parser("db", help="database schema: upgrade, downgrade, current")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    dbsub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    up = dbsub.add_parser("upgrade", parents=[common], help="migrate the schema to the newest revision (or --revision)")
    up.add_argument("--revision", default="head")
    down = dbsub.add_parser(
        "downgrade", parents=[common], help="migrate the schema back to REVISION ('base' drops every table)"
    )
    down.add_argument("revision")
    dbsub.add_parser("current", parents=[common], help="print the schema's revision and the newest one")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    where = safe_url(settings.database.url)
    engine = make_engine(settings.database)
    try:
        if args.db_command == "upgrade":
            migrate.upgrade(engine, args.revision)
            print(f"database {where} is at {_revision(migrate.schema_status(engine).current)}")
        elif args.db_command == "downgrade":
            migrate.downgrade(engine, args.revision)
            print(f"database {where} is at {_revision(migrate.schema_status(engine).current)}")
        else:
            status = migrate.schema_status(engine)
            state = "up to date" if status.up_to_date else "outdated: run `gwctl db upgrade`"
            print(f"database {where}: {_revision(status.current)} (newest {_revision(status.head)}, {state})")
            return 0 if status.up_to_date else 1
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().split("\n")[0]
        print(f"gwctl: database {where}: {reason}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    return 0


def _revision(revs: tuple[str, ...]) -> str:
    return ",".join(revs) or "empty (no schema)"
