"""Measure what the gateway adds on top of a direct upstream, in one run.

    .venv/bin/python bench/overhead.py                 # full run, about 4 minutes
    .venv/bin/python bench/overhead.py --quick         # smoke run, about 1 minute
    .venv/bin/python bench/overhead.py --rates 25,100,200 --rounds 7 --json out.json
    .venv/bin/python bench/overhead.py --litellm /path/to/venv   # LiteLLM's proxy beside it
    .venv/bin/python bench/overhead.py --clients aiohttp,other  # one gateway per upstream client

It starts the mock upstream (bench/mock_upstream.py), a bare forwarding proxy (bench/bare_proxy.py,
unless --no-bare) and the gateway (`gwctl serve` with a generated config). The proxy and the gateway
are pinned to the first CPU, the mock and the load generator (this process and wrk) to the second.
It measures three targets: the mock directly, the bare proxy in front of it, the gateway in front of it.
With --litellm VENV (a virtualenv with `litellm[proxy]` installed), LiteLLM's proxy in front of the
mock is a fourth, on the gateway's core with one worker: a side-by-side figure, not a target.
With --clients A,B a gateway per upstream HTTP client (`upstream.client`) is measured in the same
run; the first is the "gateway" column, a table at the end gives each one's CPU per request.

- once per target: closed-loop saturation at 64 connections (wrk when installed, else the built-in
  client), streaming saturation, peak RSS, start-up time to the first 200 on /v1/models;
- in rounds, each round measuring every target in turn: open-loop latency at fixed rates, timed from
  each request's scheduled send time, then sequential 50-chunk streams (time to first byte, to the end).
  The added latencies are medians over rounds of the per-round differences, so the machine's slow
  drift cancels out.

Every phase also records the server process's CPU time per request. See bench/README.md for the
targets and how to read the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from loadgen import (  # noqa: F401  (re-exported: persistence_overhead.py uses them as ov.*)
    CHAT,
    CHAT_PATH,
    KEY,
    MODEL,
    MODELS,
    STREAM,
    closed_loop,
    connect,
    now,
    open_loop,
    pct,
    request_bytes,
    run_async,
    sequential_streams,
    wrk,
)
from procs import Server, cpu_meter, free_port, started, wait_quiet

HERE = Path(__file__).resolve().parent
# The targets: (result key, comparison, bound).
TARGETS = {
    "req_s": (">=", 3500.0),
    "cpu_ms_per_req": ("<=", 0.3),
    "added_p50_ms_at_100": ("<=", 0.5),
    "added_ttfb_p50_ms": ("<=", 0.5),
}
TITLES = {"direct": "direct", "bare_proxy": "bare proxy", "gateway": "gateway", "litellm": "LiteLLM"}
SUMMED = ("sent", "requests", "errors", "streams", "server_cpu_s")  # over rounds; other figures: median
Phase = dict[str, Any]


# -- the phases -----------------------------------------------------------------------------------


def metered(target: Server, ours: list[Server], phase: Callable[[], Phase]) -> Phase:
    """Runs a phase, adding the server's CPU per request and the outside load to its results."""
    cpu: dict[str, float] = {}
    with cpu_meter(target, ours, cpu):
        out = phase()
    return {**out, **cpu, "cpu_ms_per_req": 1000 * cpu["server_cpu_s"] / max(out["sent"], 1)}


def saturate(port: int, body: bytes, conns: int, duration: float, args: argparse.Namespace, tmp: Path) -> Phase:
    if args.wrk:
        return wrk(port, body, conns, duration, tmp)
    return run_async(closed_loop(port, request_bytes("POST", CHAT_PATH, port, body), conns, duration))


def measure_saturation(name: str, target: Server, ours: list[Server], args: argparse.Namespace, tmp: Path) -> Phase:
    """The phases run once per target: warmup, saturation, streaming saturation."""
    port, title = target.port, TITLES.get(name, name)
    print(f"  {title}: warmup", flush=True)
    run_async(sequential_streams(port, request_bytes("POST", CHAT_PATH, port, STREAM), 20, 0))
    saturate(port, CHAT, 16, args.warmup, args, tmp)
    print(f"  {title}: saturation, 64 connections, {args.duration:g} s", flush=True)
    saturation = metered(target, ours, lambda: saturate(port, CHAT, 64, args.duration, args, tmp))
    print(f"  {title}: streaming saturation, 64 connections", flush=True)
    streaming = metered(target, ours, lambda: saturate(port, STREAM, 64, max(1.0, args.duration / 2), args, tmp))
    return {"startup_s": target.startup_s, "saturation": saturation, "stream_saturation": streaming}


def open_loop_round(target: Server, ours: list[Server], rate: float, args: argparse.Namespace) -> Phase:
    raw = request_bytes("POST", CHAT_PATH, target.port, CHAT)
    return metered(target, ours, lambda: run_async(
        open_loop(target.port, raw, rate, args.round_duration, args.open_warmup)))


def streams_round(target: Server, ours: list[Server], args: argparse.Namespace) -> Phase:
    raw = request_bytes("POST", CHAT_PATH, target.port, STREAM)
    return metered(target, ours, lambda: run_async(sequential_streams(target.port, raw, args.streams, 10)))


def latency_rounds(targets: dict[str, Server], args: argparse.Namespace) -> dict[str, Phase]:
    """Per target: {"open_loop": {rate: [one result per round]}, "streams": [one result per round]}.

    Within a round the targets run back to back, so round r of each sees about the same machine."""
    ours = list(targets.values())
    rounds: dict[str, Phase] = {name: {"open_loop": {f"{r:g}": [] for r in args.rates}, "streams": []}
                                for name in targets}
    rates = ", ".join(f"{r:g}" for r in args.rates)
    for i in range(args.rounds):
        print(f"  round {i + 1}/{args.rounds}: open loop at {rates} req/s, {args.round_duration:g} s each; "
              f"{args.streams} sequential streams; per target", flush=True)
        for rate in args.rates:
            for name, target in targets.items():
                rounds[name]["open_loop"][f"{rate:g}"].append(open_loop_round(target, ours, rate, args))
        for name, target in targets.items():
            rounds[name]["streams"].append(streams_round(target, ours, args))
    return rounds


# -- summaries over rounds ----------------------------------------------------------------------


def summarise(rounds: list[Phase]) -> Phase:
    """One phase over its rounds: counts and CPU summed, the worst outside load, other figures' medians."""
    out: Phase = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds]
        if key in SUMMED:
            out[key] = sum(values)
        elif key == "foreign_cores":
            out[key] = max(values)
        elif key == "events":
            out[key] = sorted(set().union(*values))
        elif key == "error_kinds":
            out[key] = dict(sum((Counter(v) for v in values), Counter()))
        elif isinstance(first, (int, float)):
            out[key] = statistics.median(values)
    out["cpu_ms_per_req"] = 1000 * out["server_cpu_s"] / max(out["sent"], 1)
    out["rounds"] = len(rounds)
    return out


def summarise_rounds(rounds: Phase) -> Phase:
    return {"open_loop": {rate: summarise(rs) for rate, rs in rounds["open_loop"].items()},
            "streams": summarise(rounds["streams"])}


def is_latency(key: str) -> bool:
    return key.endswith("_ms") and key != "cpu_ms_per_req"


def paired_median(minuend: list[Phase], subtrahend: list[Phase]) -> Phase:
    """Per latency figure, the median over rounds of round r's difference: it cancels slow drift."""
    keys = [k for k in minuend[0] if is_latency(k)]
    return {k: statistics.median(a[k] - b[k] for a, b in zip(minuend, subtrahend, strict=True)) for k in keys}


def paired(minuend: Phase, subtrahend: Phase) -> Phase:
    return {"open_loop": {rate: paired_median(rs, subtrahend["open_loop"][rate])
                          for rate, rs in minuend["open_loop"].items()},
            "streams": paired_median(minuend["streams"], subtrahend["streams"])}


# -- the run ------------------------------------------------------------------------------------


def gateway_config(port: int, mock_port: int, client: str | None = None) -> dict[str, Any]:
    return {
        **({"upstream": {"client": client}} if client else {}),
        "server": {"port": port},
        "auth": {"keys": [{"name": "bench", "key": KEY}]},
        "providers": [{"name": "mock", "kind": "openai", "base_url": f"http://127.0.0.1:{mock_port}/v1"}],
        "deployments": [{"model": MODEL, "provider": "mock"}],
    }


def litellm_config(mock_port: int) -> dict[str, Any]:
    """LiteLLM's proxy in front of the mock: one model, the bench key as its master key."""
    return {
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_base": f"http://127.0.0.1:{mock_port}/v1", "api_key": "unused"}}],
        "general_settings": {"master_key": KEY},
    }


def litellm_version(venv: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "?"


def gwctl() -> list[str]:
    script = Path(sys.executable).with_name("gwctl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli.gwctl"]


def git_version() -> str:
    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=HERE, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    return git("rev-parse", "--short", "HEAD") + ("+dirty" if git("status", "--porcelain") else "")


def launch(stack: ExitStack, server: Server) -> Server:
    """Starts one server and waits for it, so that start-up times are not shared with another's."""
    stack.enter_context(started(server))
    server.wait_ready()
    return server


def client_target(client: str) -> str:
    return f"gateway[{client}]"


def start_targets(stack: ExitStack, tmp: Path, gateway_cpus: set[int], load_cpus: set[int],
                  bare: bool, litellm: Path | None = None, clients: list[str] | None = None) -> dict[str, Server]:
    """The targets in measuring order: the mock (direct), the bare proxy, the gateway, LiteLLM."""
    mock_port = free_port()
    mock_cmd = [sys.executable, str(HERE / "mock_upstream.py"), "--port", str(mock_port)]
    targets = {"direct": launch(stack, Server("mock", mock_cmd, load_cpus, tmp, mock_port, MODELS))}
    if bare:
        port = free_port()
        cmd = [sys.executable, str(HERE / "bare_proxy.py"), "--port", str(port),
               "--upstream", f"http://127.0.0.1:{mock_port}"]
        targets["bare_proxy"] = launch(stack, Server("bare-proxy", cmd, gateway_cpus, tmp, port, MODELS))
    clients = clients or [None]  # type: ignore[list-item]
    for i, client in enumerate(clients):
        name = "gateway" if i == 0 else client_target(client)
        gw_port = free_port()
        config = tmp / f"gateway-{i}.yaml"
        config.write_text(json.dumps(gateway_config(gw_port, mock_port, client)))  # JSON is YAML
        gw_cmd = [*gwctl(), "serve", "-c", str(config)]
        targets[name] = launch(stack, Server(name, gw_cmd, gateway_cpus, tmp, gw_port, MODELS))
    if litellm is not None:
        port = free_port()
        config = tmp / "litellm.yaml"
        config.write_text(json.dumps(litellm_config(mock_port)))
        cmd = [str(litellm / "bin" / "litellm"), "--config", str(config), "--port", str(port), "--num_workers", "1"]
        # The local price map: LiteLLM would otherwise fetch it at start.
        env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        targets["litellm"] = launch(stack, Server("litellm", cmd, gateway_cpus, tmp, port, MODELS, env=env))
    for name, server in targets.items():
        print(f"{TITLES.get(name, name)} on :{server.port}, start-up {server.startup_s:.2f} s", flush=True)
    return targets


def run(args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    gateway_cpus, load_cpus = {cpus[0]}, {cpus[-1]}
    if len(cpus) < 2:
        print("warning: one CPU only, so the gateway shares it with the mock and the load generator", file=sys.stderr)
    os.sched_setaffinity(0, load_cpus)  # this process, and wrk after it
    busy = wait_quiet(args.quiet_wait)
    meta = {"busy_cores_at_start": busy, "python": platform.python_version(), "cpus": len(cpus),
            "gateway_cpus": sorted(gateway_cpus), "load_cpus": sorted(load_cpus),
            "load_tool": "wrk" if args.wrk else "python", "duration_s": args.duration, "rates": args.rates,
            "rounds": args.rounds, "round_duration_s": args.round_duration, "streams_per_round": args.streams,
            "bare_proxy": args.bare, "quick": args.quick, "git": git_version(),
            "litellm": litellm_version(args.litellm) if args.litellm else None, "clients": args.clients}
    with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        targets = start_targets(stack, tmp, gateway_cpus, load_cpus, args.bare, args.litellm, args.clients)
        ours = list(targets.values())
        results = {name: measure_saturation(name, t, ours, args, tmp) for name, t in targets.items()}
        wait_quiet(min(10.0, args.quiet_wait))  # let the servers settle after saturation before the latency rounds
        rounds = latency_rounds(targets, args)
        for name, target in targets.items():
            target.check_alive()
            results[name] |= {**summarise_rounds(rounds[name]), "peak_rss_mb": target.peak_rss_mb()}
    pairs = {"added": paired(rounds["gateway"], rounds["direct"])}
    if args.bare:
        pairs["own"] = paired(rounds["gateway"], rounds["bare_proxy"])
    if args.litellm:
        pairs["litellm"] = paired(rounds["litellm"], rounds["direct"])
    for client in (args.clients or [])[1:]:
        pairs[client_target(client)] = paired(rounds[client_target(client)], rounds["direct"])
    return {"meta": meta, **results, "paired": pairs, "rounds": rounds,
            "verdicts": verdicts(results["gateway"], pairs["added"])}


def verdicts(gw: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    values = {
        "req_s": gw["saturation"]["req_s"],
        "cpu_ms_per_req": gw["saturation"]["cpu_ms_per_req"],
        "added_p50_ms_at_100": added["open_loop"].get("100", {}).get("p50_ms"),
        "added_ttfb_p50_ms": added["streams"]["ttfb_p50_ms"],
    }
    out = {}
    for key, (op, bound) in TARGETS.items():
        value = values[key]
        ok = None if value is None else value >= bound if op == ">=" else value <= bound
        out[key] = {"value": value, "target": f"{op} {bound:g}", "pass": ok}
    return out


# -- the report ----------------------------------------------------------------------------------

# label, path into a target's results, the verdict it carries; "{rate}" rows repeat for each rate
ROWS: list[tuple[str, tuple[str, ...], str | None]] = [
    ("req/s, 64 connections", ("saturation", "req_s"), "req_s"),
    ("  closed-loop p50 ms", ("saturation", "p50_ms"), None),
    ("  closed-loop p99 ms", ("saturation", "p99_ms"), None),
    ("  server CPU ms/request", ("saturation", "cpu_ms_per_req"), "cpu_ms_per_req"),
    ("open loop {rate}/s: achieved", ("open_loop", "{rate}", "achieved"), None),
    ("  p50 ms", ("open_loop", "{rate}", "p50_ms"), "added_p50_ms_at_{rate}"),
    ("  p99 ms", ("open_loop", "{rate}", "p99_ms"), None),
    ("  server CPU ms/request", ("open_loop", "{rate}", "cpu_ms_per_req"), None),
    ("stream (50 chunks) TTFB p50 ms", ("streams", "ttfb_p50_ms"), "added_ttfb_p50_ms"),
    ("  TTFB p99 ms", ("streams", "ttfb_p99_ms"), None),
    ("  total p50 ms", ("streams", "total_p50_ms"), None),
    ("  total p99 ms", ("streams", "total_p99_ms"), None),
    ("  server CPU ms/stream", ("streams", "cpu_ms_per_req"), None),
    ("streams/s, 64 connections", ("stream_saturation", "req_s"), None),
    ("  server CPU ms/stream", ("stream_saturation", "cpu_ms_per_req"), None),
    ("peak RSS MB", ("peak_rss_mb",), None),
    ("start-up s (first 200 /v1/models)", ("startup_s",), None),
]
NAN = float("nan")


def _expand(rates: list[str]) -> list[tuple[str, tuple[str, ...], str | None]]:
    fixed = [row for row in ROWS if "{rate}" not in row[1]]
    per_rate = [row for row in ROWS if "{rate}" in row[1]]
    at = next(i for i, row in enumerate(ROWS) if "{rate}" in row[1])
    expanded = [
        (label.format(rate=rate), tuple(p.format(rate=rate) for p in path), key and key.format(rate=rate))
        for rate in rates
        for label, path, key in per_rate
    ]
    return fixed[:at] + expanded + fixed[at:]


def report(res: dict[str, Any]) -> str:
    d, b, g, v = res["direct"], res.get("bare_proxy"), res["gateway"], res["verdicts"]
    added, own = res["paired"]["added"], res["paired"].get("own")
    lite, lite_added = res.get("litellm"), res["paired"].get("litellm")
    extra = f"{'LiteLLM':>11}{'its added':>11}" if lite else ""
    head = (f"{'':36}{'direct':>11}{'bare proxy':>11}{'gateway':>11}{'added':>11}{'own':>11}{'ratio':>8}{extra}"
            "  target")
    lines = [head, "-" * (len(head) + 8)]
    for label, path, key in _expand(list(d["open_loop"])):
        dv, gv = _get(d, path), _get(g, path)
        bv = _get(b, path) if b else NAN
        pair_added, pair_own = _find(added, path), _find(own, path)
        add = gv - dv if pair_added is None else pair_added
        mine = gv - bv if pair_own is None else pair_own
        mark = " *" if pair_added is not None else ""
        side = ""
        if lite:
            lv, pair_lite = _get(lite, path), _find(lite_added, path)
            side = f"{_num(lv):>11}{_num(lv - dv if pair_lite is None else pair_lite, '+'):>11}"
        lines.append(f"{label + mark:<36}{_num(dv):>11}{_num(bv):>11}{_num(gv):>11}{_num(add, '+'):>11}"
                     f"{_num(mine, '+'):>11}{_num(gv / dv if dv else NAN):>8}{side}  {_verdict(v.get(key or ''))}")
    lines.append(lines[1])
    lines += _footer(res, [r for r in (d, b, g, lite) if r])
    if len(res["meta"].get("clients") or []) > 1:
        lines += ["", *clients_report(res)]
    return "\n".join(lines)


def clients_report(res: dict[str, Any]) -> list[str]:
    """Per upstream client, the gateway's CPU per request in each phase of this run."""
    clients = res["meta"]["clients"]
    names = {c: "gateway" if i == 0 else client_target(c) for i, c in enumerate(clients)}
    rates = list(res["direct"]["open_loop"])
    head = f"{'server CPU ms/request, per upstream client':<44}" + "".join(f"{c:>11}" for c in clients)
    rows = [("saturation, 64 connections", ("saturation", "cpu_ms_per_req")),
            *((f"open loop {r}/s", ("open_loop", r, "cpu_ms_per_req")) for r in rates),
            ("sequential streams (per stream)", ("streams", "cpu_ms_per_req")),
            ("stream saturation (per stream)", ("stream_saturation", "cpu_ms_per_req")),
            ("req/s, 64 connections", ("saturation", "req_s"))]
    lines = [head, "-" * len(head)]
    for label, path in rows:
        lines.append(f"{label:<44}" + "".join(f"{_num(_get(res[names[c]], path)):>11}" for c in clients))
    base = res[names[clients[0]]]["saturation"]["cpu_ms_per_req"]
    for c in clients[1:]:
        other = res[names[c]]["saturation"]["cpu_ms_per_req"]
        lines.append(f"{c} saves {100 * (base - other) / base:.1f}% CPU per request at saturation against {clients[0]}")
    return lines


def _footer(res: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    meta = res["meta"]
    names = [name for name in TITLES if name in res]
    errors = ", ".join(f"{TITLES[n]} {sum(p.get('errors', 0) for p in _phases(res[n]))}" for n in names)
    foreign = max(p.get("foreign_cores", 0.0) for r in results for p in _phases(r))
    events = sorted(set().union(*(r["streams"]["events"] for r in results)))
    rounds = f"{meta['rounds']} round{'s' if meta['rounds'] != 1 else ''}"
    lines = [
        "added = gateway - direct; own = gateway - bare proxy (the gateway's own work); ratio = gateway / direct"
        + ("; its added = LiteLLM - direct" if res.get("litellm") else ""),
        f"* added and own: medians over {rounds} of per-round differences, "
        "so they may differ from the columns' difference",
        f"errors: {errors}; SSE events per stream: {events}; load tool: {meta['load_tool']}; "
        f"other load: {foreign:.2f} cores at most",
    ]
    if foreign > 0.2:
        lines.append("warning: other processes used CPU during the run; absolute figures are unreliable")
    return lines


def _get(r: dict[str, Any], keys: tuple[str, ...]) -> float:
    for k in keys:
        r = r[k]
    return float(r)  # type: ignore[arg-type]


def _find(r: dict[str, Any] | None, keys: tuple[str, ...]) -> float | None:
    """The paired difference at `keys`, or None where that figure is not paired."""
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return float(r)  # type: ignore[arg-type]


def _num(x: float, sign: str = "") -> str:
    if math.isnan(x):
        return "-"
    digits = 0 if abs(x) >= 1000 else 1 if abs(x) >= 100 else 3
    return f"{x:{sign},.{digits}f}"


def _verdict(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    return f"{r['target']:<10}{'n/a' if r['pass'] is None else 'PASS' if r['pass'] else 'FAIL'}"


def _phases(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["saturation"], r["streams"], r["stream_saturation"], *r["open_loop"].values()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Gateway overhead against a direct mock upstream.")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per saturation phase (default 10)")
    p.add_argument("--rates", default="25,100", help="open-loop rates in req/s, comma-separated (default 25,100)")
    p.add_argument("--rounds", type=int, default=5, help="latency rounds (default 5)")
    p.add_argument("--round-duration", type=float, default=4.0,
                   help="seconds per target and rate in each round, after 1 s of warmup (default 4)")
    p.add_argument("--streams", type=int, default=100, help="sequential streams per target per round (default 100)")
    p.add_argument("--quick", action="store_true", help="short phases and one round, for a smoke run")
    p.add_argument("--no-bare", dest="bare", action="store_false", help="leave out the bare proxy")
    p.add_argument("--no-wrk", dest="wrk", action="store_false", help="use the built-in closed-loop client")
    p.add_argument("--quiet-wait", type=float, default=60.0,
                   help="wait up to this many seconds for other load to stop before starting (default 60)")
    p.add_argument("--json", type=Path, help="also write the results, each round's included, to this file")
    p.add_argument("--litellm", type=Path, metavar="VENV",
                   help="also measure LiteLLM's proxy, from this virtualenv (pip install 'litellm[proxy]')")
    p.add_argument("--clients", help="upstream HTTP clients (upstream.client), comma-separated: one gateway each")
    args = p.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    args.clients = [c.strip() for c in args.clients.split(",") if c.strip()] if args.clients else None
    args.wrk = args.wrk and shutil.which("wrk") is not None
    args.warmup, args.open_warmup = 5.0, 1.0
    if args.quick:
        args.duration, args.warmup, args.quiet_wait = 1.0, 1.0, 0.0
        args.rounds, args.round_duration, args.streams, args.open_warmup = 1, 1.0, 30, 0.5
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.litellm is not None and not (args.litellm / "bin" / "litellm").exists():
        p.error(f"--litellm: no bin/litellm in {args.litellm}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the children are stopped
    try:
        res = run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print()
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0 if all(v["pass"] is not False for v in res["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
