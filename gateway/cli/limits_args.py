"""What `gwctl keys` and `gwctl teams` share: the limit options, running a command against the
database with one-line errors, and plain tables."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from gateway.config import Settings, load_config
from gateway.persistence.engine import make_engine, safe_url
from gateway.persistence.keys import KeyExists, KeyNotFound
from gateway.persistence.teams import TeamInUse

PERIODS = ("daily", "weekly", "monthly", "total")


def add_limit_args(p: argparse.ArgumentParser, *, clearing: bool = False) -> None:
    """With `clearing`, every option also takes 'none' (remove that limit)."""
    num = str if clearing else int
    p.add_argument("--rpm", type=num, help="requests per minute")
    p.add_argument("--tpm", type=num, help="tokens per minute")
    p.add_argument("--max-parallel", type=num, help="requests in flight at once")
    p.add_argument("--budget", type=str if clearing else float, help="budget in USD per --period")
    p.add_argument("--period", choices=PERIODS, help="budget period (UTC calendar; default monthly)")
    p.add_argument("--models", help="allowed models: comma-separated fnmatch patterns ('gpt-4o*,org/*')")
    p.add_argument(
        "--regions", help="allowed endpoint regions: comma-separated names or fnmatch patterns ('eu-*,us-east')"
    )
    p.add_argument(
        "--data-collection",
        choices=("allow", "deny"),
        help="deny: never route to a provider that may keep or train on prompts",
    )
    p.add_argument("--expires", help="expiry, ISO 8601 (UTC when no offset is given)")
    p.add_argument("--metadata", help="a JSON object")


def _parse(name: str, raw: Any, kind: Callable[[str], Any]) -> Any:
    if isinstance(raw, str):
        if raw.lower() == "none":
            return None
        try:
            value = kind(raw)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"--{name}: {raw!r} is not valid") from None
    else:
        value = raw
    if isinstance(value, int | float) and value < 0:
        raise argparse.ArgumentTypeError(f"--{name} must not be negative")
    if isinstance(value, int) and name != "budget" and value < 1:
        raise argparse.ArgumentTypeError(f"--{name} must be at least 1")
    return value


def _patterns(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


def _expiry(raw: str) -> datetime:
    at = datetime.fromisoformat(raw)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _metadata(raw: str) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return value


def limit_values(args: argparse.Namespace, *, clearing: bool = False) -> dict[str, Any]:
    """The database columns for the options given (absent options are left out)."""
    out: dict[str, Any] = {}
    spec: Sequence[tuple[str, str, Callable[[str], Any]]] = (
        ("rpm", "rpm_limit", int),
        ("tpm", "tpm_limit", int),
        ("max_parallel", "max_parallel", int),
        ("budget", "budget_usd", float),
        ("models", "allowed_models", _patterns),
        ("regions", "allowed_regions", _patterns),
        ("expires", "expires_at", _expiry),
        ("metadata", "metadata", _metadata),
    )
    for attr, column, kind in spec:
        raw = getattr(args, attr)
        if raw is not None:
            out[column] = _parse(attr.replace("_", "-"), raw, kind)
    if args.period is not None:
        out["budget_period"] = args.period
    if args.data_collection is not None:
        out["data_collection"] = args.data_collection
    return out


def run_db(args: argparse.Namespace, command: Callable[[Any, Settings, argparse.Namespace], int]) -> int:
    settings = load_config(args.config)
    engine = make_engine(settings.database)
    try:
        return command(engine, settings, args)
    except (KeyExists, KeyNotFound, TeamInUse, argparse.ArgumentTypeError) as exc:
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


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    all_rows = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in all_rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in all_rows)
