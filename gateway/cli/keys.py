"""`gwctl keys create|list|revoke`: gateway keys in the database. The secret is printed once, at
creation; only its sha256 digest is stored. Every gateway replica picks changes up within
`persistence.refresh_interval` seconds."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.config import Settings, load_config
from gateway.persistence import keys
from gateway.persistence.engine import make_engine, safe_url


def add_parser(sub: Any) -> None:
    p = sub.add_parser("keys", help="gateway keys in the database: create, list, revoke")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    create = ksub.add_parser("create", parents=[common], help="create a key and print it (shown only this once)")
    create.add_argument("name")
    create.add_argument("--owner")
    create.add_argument("--rpm", type=int, help="requests per minute limit")
    create.add_argument("--tpm", type=int, help="tokens per minute limit")
    create.add_argument("--budget", type=float, help="budget in USD")
    listing = ksub.add_parser("list", parents=[common], help="list keys (never their secrets)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = ksub.add_parser("revoke", parents=[common], help="revoke a key by name")
    revoke.add_argument("name")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = load_config(args.config)
    engine = make_engine(settings.database)
    try:
        return _COMMANDS[args.keys_command](engine, settings, args)
    except (keys.KeyExists, keys.KeyNotFound) as exc:
        print(f"gwctl: {exc}", file=sys.stderr)
        return 2
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().split("\n")[0]
        print(
            f"gwctl: database {safe_url(settings.database.url)}: {reason} (did you run `gwctl db upgrade`?)",
            file=sys.stderr,
        )
        return 2
    finally:
        engine.dispose()


def _create(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    if any(k.name == args.name for k in settings.auth.keys):
        print(f"gwctl: {args.name!r} is already a key name in the config (auth.keys)", file=sys.stderr)
        return 2
    secret = keys.create_key(
        engine, args.name, owner=args.owner, rpm_limit=args.rpm, tpm_limit=args.tpm, budget_usd=args.budget
    )
    print(secret)
    print(f"created key {args.name!r}: store it now, it is not shown again", file=sys.stderr)
    if not settings.persistence.enabled:
        print(
            "note: persistence.enabled is false, so the gateway does not load keys from the database", file=sys.stderr
        )
    return 0


def _list(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    stored = keys.list_keys(engine)
    if args.json:
        rows = [
            {
                "name": k.name,
                "prefix": k.prefix,
                "owner": k.owner,
                "rpm_limit": k.rpm_limit,
                "tpm_limit": k.tpm_limit,
                "budget_usd": k.budget_usd,
                "created_at": k.created_at.isoformat(),
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
            }
            for k in stored
        ]
        print(json.dumps(rows, indent=2))
        return 0
    if not stored:
        print("no keys in the database")
        return 0
    header = ("NAME", "PREFIX", "OWNER", "RPM", "TPM", "BUDGET", "CREATED", "STATUS")
    table = [header] + [
        (
            k.name,
            k.prefix + "…",
            k.owner or "-",
            _opt(k.rpm_limit),
            _opt(k.tpm_limit),
            f"${k.budget_usd:g}" if k.budget_usd is not None else "-",
            k.created_at.strftime("%Y-%m-%d %H:%M"),
            "active" if k.active else f"revoked {k.revoked_at:%Y-%m-%d %H:%M}",
        )
        for k in stored
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table))
    return 0


def _revoke(engine: Any, settings: Settings, args: argparse.Namespace) -> int:
    keys.revoke_key(engine, args.name)
    print(f"revoked key {args.name!r}; gateways drop it within {settings.persistence.refresh_interval:g} s")
    return 0


def _opt(v: int | None) -> str:
    return "-" if v is None else str(v)


_COMMANDS = {"create": _create, "list": _list, "revoke": _revoke}
