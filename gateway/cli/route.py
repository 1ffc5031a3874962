"""`gwctl route explain`: how the gateway would route a request, and why.

    gwctl route explain --model M --file request.json [-c config.yaml] [--key NAME] [--json]
    gwctl route explain --model M --file request.json --live      # ask a running gateway

A dry run over the configured catalog (deployments, and engine replicas as configured, not
started) with fresh state: every candidate, why it was filtered out or its score terms, and the
pick. `--live` posts the request to the running gateway's admin API instead
(`POST /admin/api/route/explain`), which explains it against the live state (breakers, load,
latency statistics, the affinity index). Nothing is sent to any upstream either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import yaml

from gateway.catalog import Catalog, endpoints_from_settings
from gateway.cli.client import add_admin_key_options, client_settings
from gateway.config import Settings, load_config
from gateway.engines import all_engine_endpoints
from gateway.limits.stage import Limiter
from gateway.limits.store import MemoryLimitStore
from gateway.pipeline.explain import OPS, explain_with
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.router import Router
from gateway.routing.shared import SharedState
from gateway.state_store.memory import MemoryStore
from kernel.errors import GatewayError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("route", help="explain routing decisions")
    route_sub = p.add_subparsers(dest="route_command", metavar="SUBCOMMAND")
    e = route_sub.add_parser("explain", help="dry-run the routing of a request: candidates, reasons, score terms, pick")
    e.add_argument("--model", "-m", help="the public model name (overrides the file's `model`)")
    e.add_argument("--file", "-f", required=True, help="request body (JSON); '-' reads stdin")
    e.add_argument("--config", "-c", help="YAML config file (default: $GW_CONFIG)")
    e.add_argument("--op", choices=OPS, default="chat", help="API operation (default: chat)")
    e.add_argument("--key", help="the gateway key name the request would come with (its policy applies)")
    e.add_argument("--json", action="store_true", help="print the explanation as JSON")
    e.add_argument("--live", action="store_true", help="explain against a running gateway's live state ($GW_URL, $GW_ADMIN_KEY)")
    add_admin_key_options(e)
    e.set_defaults(run=run_explain)
    p.set_defaults(run=lambda args: (p.print_help(sys.stderr), 2)[1])


def _read_body(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise SystemExit(f"gwctl: cannot read {path}: {exc.strerror or exc}") from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"gwctl: {path} is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise SystemExit(f"gwctl: {path} must hold a JSON object (a request body)")
    return body


class _PlannedEngine:
    """An engine's replicas as the config describes them, for a dry run (nothing is started)."""

    def __init__(self, cfg: Any) -> None:
        port = cfg.base_port
        self.replicas = [
            SimpleNamespace(index=i, base_url=f"http://{cfg.host}:{port + i if port else 0}/v1") for i in range(cfg.replicas)
        ]

    def is_ready(self, index: int) -> bool:
        return True


def dry_run_settings(path: str | None) -> Settings:
    """The config, with a placeholder for any provider key that is not in the environment: a dry
    run sends nothing upstream, so it needs no secret."""
    env = dict(os.environ)
    source = path or env.get("GW_CONFIG")
    if source:
        try:
            data = yaml.safe_load(Path(source).read_text()) or {}
        except (OSError, yaml.YAMLError):
            data = {}  # load_config reports it properly
        for provider in data.get("providers") or () if isinstance(data, dict) else ():
            name = provider.get("api_key_env") if isinstance(provider, dict) else None
            if isinstance(name, str) and not env.get(name):
                env[name] = "dry-run-placeholder"
    return load_config(path, environ=env)


def dry_run_catalog(settings: Settings) -> Catalog:
    engines = [_PlannedEngine(cfg) for cfg in settings.engines]
    return Catalog([*endpoints_from_settings(settings), *all_engine_endpoints(settings.engines, engines)], created=0)


async def explain_request(settings: Settings, op: str, body: dict[str, Any], key: str | None) -> tuple[dict[str, Any], str]:
    """(the explanation as a dict, as a table) of routing `body` over fresh state."""
    catalog = dry_run_catalog(settings)
    shared = SharedState(settings.routing, settings.state_store, catalog, MemoryStore(), CircuitBreaker(settings.breaker))
    router = Router(settings.routing, catalog, shared)
    # Config keys' and teams' regions and data policy narrow routing.keys', as in the gateway.
    regions = {ep.region for ep in catalog.endpoints}
    prices = {ep.id: ep.deployment.price for ep in catalog.endpoints}
    router.key_policies = Limiter(settings, MemoryLimitStore(), prices.get, regions=regions).key_policy
    return await explain_with(router, op, body, key)


def _live(op: str, body: dict[str, Any], key: str | None, args: Any) -> dict[str, Any]:
    client = client_settings(args)
    headers = {}
    if client.admin_key is not None:
        headers["authorization"] = f"Bearer {client.admin_key.get_secret_value()}"
    url = client.url.rstrip("/") + "/admin/api/route/explain"
    try:
        response = httpx.post(url, json={"op": op, "key": key, "body": body}, headers=headers, timeout=client.timeout)
    except httpx.HTTPError as exc:
        raise SystemExit(f"gwctl: cannot reach the gateway at {client.url}: {exc}") from None
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:200]
        raise SystemExit(f"gwctl: {response.status_code} {message}")
    return response.json()  # type: ignore[no-any-return]


def run_explain(args: argparse.Namespace) -> int:
    try:
        body = _read_body(args.file)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.model:
        body["model"] = args.model
    if not body.get("model"):
        print("gwctl: no model: pass --model or put `model` in the request file", file=sys.stderr)
        return 2
    try:
        if args.live:
            doc = _live(args.op, body, args.key, args)
            text = doc.pop("table", "")
        else:
            doc, text = asyncio.run(explain_request(dry_run_settings(args.config), args.op, body, args.key))
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    except GatewayError as exc:
        if exc.status_code >= 500 or type(exc).__name__ == "ConfigError":
            raise
        print(f"gwctl: the gateway would answer {exc.status_code}: {exc.message}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else text)
    return 0
