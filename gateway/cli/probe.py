"""`gwctl probe`: run an on-demand audit of a provider's endpoints through a running gateway.

    gwctl probe --provider x [--model m] [--endpoint id] [--probes logprob_drift,fidelity] [--json]
                [--url http://gateway:8080] [--admin-key KEY]

Calls `POST /admin/api/probes/run`, shows progress on stderr (a bar on a terminal, plain lines
otherwise), then prints a table per endpoint (probe, statistic, p/e, samples, tokens, verdict)
and its state transitions; `--json` prints the summary instead. The gateway stores the run.

Exit: 0 every endpoint healthy, 1 degraded (a failing verdict or a state other than healthy),
2 usage error, unknown provider or probe, or the gateway could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import httpx

from gateway.cli.client import add_admin_key_options, client_settings

EXIT_HEALTHY, EXIT_DEGRADED, EXIT_ERROR = 0, 1, 2


def add_parser(sub: Any) -> None:
    p = sub.add_parser("probe", help="run quality probes on a provider's endpoints now and print a verdict")
    p.add_argument("--provider", "-p", help="provider name (as in the config)")
    p.add_argument("--model", "-m", help="only this public model")
    p.add_argument("--endpoint", "-e", help="only this endpoint id")
    p.add_argument("--probes", help="comma-separated probe or suite names (default: quality)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--url", help="the gateway's base URL (default: $GW_URL)")
    add_admin_key_options(p)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the whole audit (default 1800)")
    p.set_defaults(run=run)


class Progress:
    """A one-line progress bar on a terminal; one plain line per finished probe otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()

    def event(self, e: dict[str, Any]) -> None:
        kind = e.get("event")
        if kind == "progress" and self.tty:
            done, total = int(e.get("done", 0)), max(1, int(e.get("total", 1)))
            filled = int(30 * done / total)
            bar = "#" * filled + "-" * (30 - filled)
            self.out.write(f"\r{e.get('endpoint')} {e.get('probe'):<14} [{bar}] {done}/{total}")
            self.out.flush()
        elif kind == "result":
            self._line(f"{e.get('endpoint')}: {e.get('probe')}{' (confirm)' if e.get('confirm') else ''} -> {e.get('verdict')}")
        elif kind == "transition":
            self._line(f"{e.get('endpoint')}: {e.get('from')} -> {e.get('to')} ({e.get('reason')})")
        elif kind == "started":
            self._line(f"{e.get('endpoint')}: probing {', '.join(e.get('probes') or [])} (state {e.get('state')})")
        elif kind == "confirm":
            self._line(f"{e.get('endpoint')}: confirmatory round: {', '.join(e.get('probes') or [])}")
        elif kind == "template" and e.get("status") == "differs":
            self._line(f"{e.get('endpoint')}: {e.get('reason')} (reference {e.get('reference')})")

    def _line(self, text: str) -> None:
        self.out.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.out.flush()


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(run: dict[str, Any]) -> str:
    rows = [("probe", "statistic", "p/e", "samples", "tokens", "verdict")]
    for r in run["results"]:
        pe = f"p={_number(r['p_value'])}" if r.get("p_value") is not None else (
            f"e={_number(r['e_value'])}" if r.get("e_value") is not None else "-")
        name = r["probe"] + (" (confirm)" if r.get("confirm") else "")
        verdict = r["verdict"]
        details = r.get("details") or {}
        why = details.get("error") or details.get("skipped") or details.get("reason")
        rows.append((name, _number(r.get("statistic")), pe, _number(r.get("samples")), _number(r.get("tokens")),
                     verdict + (f": {why}" if why and verdict in ("error", "inconclusive") else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [f"{run['endpoint']} ({run['model']}, {run['provider']})"]
    lines += ["  " + "  ".join(cell.ljust(widths[i]) if i < 5 else cell for i, cell in enumerate(row)) for row in rows]
    template = run.get("template") or {}
    if template.get("status") == "differs":
        lines.append(f"  reference not compared with: {template.get('reason')}")
    for t in run["transitions"]:
        lines.append(f"  state: {t['from']} -> {t['to']}: {t['reason']}")
    lines.append(f"  now {run['state'].upper()}; verdict {run['verdict']}; {run['tokens']} tokens")
    return "\n".join(lines)


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.strip():
            yield json.loads(line)


def _error_message(response: httpx.Response) -> str:
    response.read()
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def run(args: argparse.Namespace) -> int:
    if not (args.provider or args.model or args.endpoint):
        print("gwctl probe: say what to probe: --provider, --model or --endpoint", file=sys.stderr)
        return EXIT_ERROR
    client = client_settings(args)
    url = client.url.rstrip("/")
    key = client.admin_key.get_secret_value() if client.admin_key is not None else None
    body: dict[str, Any] = {k: v for k, v in (("provider", args.provider), ("model", args.model),
                                                ("endpoint", args.endpoint)) if v}
    if args.probes:
        body["probes"] = [p.strip() for p in args.probes.split(",") if p.strip()]
    headers = {"authorization": f"Bearer {key}"} if key else {}
    progress = Progress(sys.stderr)
    summary: dict[str, Any] | None = None
    timeout = httpx.Timeout(args.timeout, connect=10.0)
    try:
        with httpx.stream("POST", url + "/admin/api/probes/run", json=body, headers=headers, timeout=timeout) as response:
            if response.status_code >= 400:
                print(f"gwctl probe: {response.status_code} {_error_message(response)}", file=sys.stderr)
                return EXIT_ERROR
            for event in _events(response):
                if event.get("event") == "summary":
                    summary = event
                elif event.get("event") == "error":
                    print(f"gwctl probe: the audit failed: {event.get('message')}", file=sys.stderr)
                    return EXIT_ERROR
                else:
                    progress.event(event)
    except httpx.HTTPError as exc:
        print(f"gwctl probe: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ValueError as exc:
        print(f"gwctl probe: unreadable answer from the gateway: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if summary is None:
        print("gwctl probe: the gateway ended the audit without a summary", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print("\n\n".join(table(r) for r in summary["runs"]))
    return EXIT_DEGRADED if summary["verdict"] == "fail" else EXIT_HEALTHY
