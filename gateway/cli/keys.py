"""`gwctl keys create|list|show|update|revoke|rotate`: gateway keys in the database. The secret is
printed once, at creation (and at rotation); only its sha256 digest is stored. Every gateway
replica picks changes up within `persistence.refresh_interval` seconds."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gateway.cli.limits_args import add_limit_args, limit_values, run_db, table
from gateway.config import Settings
from gateway.persistence import keys
from gateway.persistence.key_views import views


def add_parser(sub: Any) -> None:
    p = sub.add_parser("keys", help="gateway keys in the database: create, list, show, update, revoke, rotate")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    common.add_argument("--json", action="store_true", help="print JSON")
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = ksub.add_parser("create", parents=[common], help="create a key and print it (shown only this once)")
    create.add_argument("name")
    create.add_argument("--owner")
    create.add_argument("--team", help="the team it belongs to (`gwctl teams create`)")
    add_limit_args(create)
    ksub.add_parser("list", parents=[common], help="list keys with spend and remaining budget (never their secrets)")
    show = ksub.add_parser("show", parents=[common], help="one key: limits, spend, remaining budget")
    show.add_argument("name")
    upd = ksub.add_parser("update", parents=[common], help="change a key's limits ('none' clears one)")
    upd.add_argument("name")
    upd.add_argument("--owner")
    upd.add_argument("--team", help="move it to this team ('none': no team)")
    add_limit_args(upd, clearing=True)
    revoke = ksub.add_parser("revoke", parents=[common], help="revoke a key by name")
    revoke.add_argument("name")
    rotate = ksub.add_parser("rotate", parents=[common], help="a new secret for a key (same name, limits, spend)")
    rotate.add_argument("name")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_db(args, _COMMANDS[args.keys_command])


def _create(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    if any(k.name == args.name for k in settings.auth.keys):
        print(f"gwctl: {args.name!r} is already a key name in the config (auth.keys)", file=sys.stderr)
        return 2
    secret = keys.create_key(engine, args.name, owner=args.owner, team=args.team, **limit_values(args))
    if args.json:
        print(json.dumps({"name": args.name, "key": secret}))
    else:
        print(secret)
    print(f"created key {args.name!r}: store it now, it is not shown again", file=sys.stderr)
    if not settings.persistence.enabled:
        print("note: persistence.enabled is false, so the gateway does not load keys from the database", file=sys.stderr)
    return 0


def _rows(engine: Any) -> list[dict[str, Any]]:
    return views(engine, time.time())[0]


def _list(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    rows = _rows(engine)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no keys in the database")
        return 0
    header = ("NAME", "PREFIX", "OWNER", "TEAM", "RPM", "TPM", "PAR", "BUDGET", "SPENT", "LEFT", "CREATED", "STATUS")
    body = [
        (
            r["name"],
            r["prefix"] + "…",
            r["owner"] or "-",
            r["team"] or "-",
            _opt(r["rpm_limit"]),
            _opt(r["tpm_limit"]),
            _opt(r["max_parallel"]),
            f"${r['budget_usd']:g}/{r['budget_period']}" if r["budget_usd"] is not None else "-",
            f"${r['spend_usd']:.2f}",
            f"${r['remaining_usd']:.2f}" if r["remaining_usd"] is not None else "-",
            r["created_at"][:16].replace("T", " "),
            r["status"] if r["status"] != "revoked" else f"revoked {r['revoked_at'][:16].replace('T', ' ')}",
        )
        for r in rows
    ]
    print(table(header, body))
    return 0


def _show(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    row = next((r for r in _rows(engine) if r["name"] == args.name), None)
    if row is None:
        raise keys.KeyNotFound(f"no key named {args.name!r}")
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        for name, value in row.items():
            print(f"{name:18} {value if value is not None else '-'}")
    return 0


def _update(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    changes = limit_values(args, clearing=True)
    if args.owner is not None:
        changes["owner"] = None if args.owner == "none" else args.owner
    team: object = ... if args.team is None else (None if args.team == "none" else args.team)
    keys.update_key(engine, args.name, team=team, **changes)
    print(f"updated key {args.name!r}; gateways take it up within {settings.persistence.refresh_interval:g} s", file=sys.stderr)
    return _show(engine, settings, args)


def _revoke(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    keys.revoke_key(engine, args.name)
    print(f"revoked key {args.name!r}; gateways drop it within {settings.persistence.refresh_interval:g} s")
    return 0


def _rotate(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    secret = keys.rotate_key(engine, args.name)
    print(json.dumps({"name": args.name, "key": secret}) if args.json else secret)
    print(
        f"rotated key {args.name!r}: store the new secret now; the old one stops working within"
        f" {settings.persistence.refresh_interval:g} s",
        file=sys.stderr,
    )
    return 0


def _opt(v: int | None) -> str:
    return "-" if v is None else str(v)


_COMMANDS = {"create": _create, "list": _list, "show": _show, "update": _update, "revoke": _revoke, "rotate": _rotate}
