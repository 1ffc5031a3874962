"""`gwctl teams create|list|show|update|delete`: teams in the database. A team's limits and
budget bind all its keys together (`gwctl keys create NAME --team TEAM`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gateway.cli.limits_args import add_limit_args, limit_values, run_db, table
from gateway.config import Settings
from gateway.persistence import teams
from gateway.persistence.key_views import views
from gateway.persistence.keys import TeamNotFound


def add_parser(sub: Any) -> None:
    p = sub.add_parser("teams", help="teams in the database: their limits and budget bind all their keys")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    common.add_argument("--json", action="store_true", help="print JSON")
    tsub = p.add_subparsers(dest="teams_command", metavar="ACTION", required=True)
    create = tsub.add_parser("create", parents=[common], help="create a team")
    create.add_argument("name")
    add_limit_args(create)
    tsub.add_parser("list", parents=[common], help="list teams with spend and remaining budget")
    show = tsub.add_parser("show", parents=[common], help="one team: limits, keys, spend, remaining budget")
    show.add_argument("name")
    upd = tsub.add_parser("update", parents=[common], help="change a team's limits ('none' clears one)")
    upd.add_argument("name")
    add_limit_args(upd, clearing=True)
    delete = tsub.add_parser("delete", parents=[common], help="delete a team that no key belongs to")
    delete.add_argument("name")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_db(args, _COMMANDS[args.teams_command])


def _rows(engine: Any) -> list[dict[str, Any]]:
    return views(engine, time.time())[1]


def _create(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    teams.create_team(engine, args.name, **limit_values(args))
    print(f"created team {args.name!r}", file=sys.stderr)
    return _show(engine, settings, args)


def _list(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    rows = _rows(engine)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no teams in the database")
        return 0
    header = ("NAME", "KEYS", "RPM", "TPM", "PAR", "BUDGET", "SPENT", "LEFT", "RESETS")
    body = [
        (
            r["name"],
            str(len(r["keys"])),
            _opt(r["rpm"]),
            _opt(r["tpm"]),
            _opt(r["max_parallel"]),
            f"${r['budget_usd']:g}/{r['budget_period']}" if r["budget_usd"] is not None else "-",
            f"${r['spend_usd']:.2f}",
            f"${r['remaining_usd']:.2f}" if r["remaining_usd"] is not None else "-",
            (r["budget_resets_at"] or "-")[:16].replace("T", " "),
        )
        for r in rows
    ]
    print(table(header, body))
    return 0


def _show(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    row = next((r for r in _rows(engine) if r["name"] == args.name), None)
    if row is None:
        raise TeamNotFound(f"no team named {args.name!r}")
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        for name, value in row.items():
            print(f"{name:18} {value if value is not None else '-'}")
    return 0


def _update(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    teams.update_team(engine, args.name, **limit_values(args, clearing=True))
    print(f"updated team {args.name!r}; gateways take it up within {settings.persistence.refresh_interval:g} s", file=sys.stderr)
    return _show(engine, settings, args)


def _delete(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    teams.delete_team(engine, args.name)
    print(f"deleted team {args.name!r}")
    return 0


def _opt(v: int | None) -> str:
    return "-" if v is None else str(v)


_COMMANDS = {"create": _create, "list": _list, "show": _show, "update": _update, "delete": _delete}
