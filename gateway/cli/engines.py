"""`gwctl engines`: the local engines of a running gateway, with state, pid, port, model, uptime, restarts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gateway.cli.client import AdminClient, GatewayUnreachable, add_admin_key_options, client_settings


def add_parser(sub: Any) -> None:
    p = sub.add_parser("engines", help="list the local engines of a running gateway")
    p.add_argument("--url", help="gateway base URL (default: $GW_URL or http://127.0.0.1:8080)")
    add_admin_key_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    client = AdminClient(client_settings(args))
    try:
        engines = client.get("/admin/api/engines")["data"]
    except GatewayUnreachable as exc:
        print(f"gwctl: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    if args.json:
        print(json.dumps(engines, indent=2))
        return 0
    print(format_table(engines))
    return 0


def format_table(engines: list[dict[str, Any]]) -> str:
    header = ("ENGINE", "REPLICA", "STATE", "PID", "PORT", "MODEL", "UPTIME", "RESTARTS")
    rows = [header]
    for engine in engines:
        for r in engine["replicas"]:
            uptime = r.get("uptime_s")
            rows.append(
                (
                    engine["name"],
                    str(r["index"]),
                    r["state"],
                    str(r.get("pid") or "-"),
                    str(r.get("port") or "-"),
                    r["model"],
                    f"{uptime:.0f}s" if uptime is not None else "-",
                    str(r["restarts"]),
                )
            )
    if len(rows) == 1:
        return "no local engines are configured"
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
