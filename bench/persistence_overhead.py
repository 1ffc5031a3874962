"""What persistence adds to the gateway's latency: the same gateway with persistence off, on
SQLite and on PostgreSQL, in front of the same mock upstream.

    .venv/bin/python bench/persistence_overhead.py                      # both modes, about 2 minutes
    .venv/bin/python bench/persistence_overhead.py --mode inprocess      # paired A/B only, ~20 s
    .venv/bin/python bench/persistence_overhead.py --mode servers --rate 200 --duration 10 --rounds 3
    .venv/bin/python bench/persistence_overhead.py --quick

Two measurements:

- `inprocess` (paired A/B): the apps (persistence off, SQLite, PostgreSQL) run in one event loop over
  an in-process fake upstream, each with its lifespan (so the background writer really writes, in
  its thread, during the run). Requests go to them in turn, one at a time, straight through ASGI;
  each variant's latency distribution is sampled at the same moments, so load from other processes
  on the machine falls on every variant alike. Also times the accountant's sinks alone.
- `servers`: reuses bench/overhead.py's harness: the mock upstream and the gateway (`gwctl serve`)
  run as processes, the gateway pinned to the first CPU, the mock and this load generator to the
  last; per variant, `gwctl db upgrade`, start, warm up, then requests open-loop at a fixed rate,
  each timed from its scheduled send time; variants in interleaved rounds, median of the rounds'
  medians. On a busy machine this one is noisy: read `busy_cores_at_start`.

After each run it checks that every request was written to the database.
Target (issue 5): added median latency with persistence on, against off, under 0.2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import overhead as ov  # bench/overhead.py (this script's directory is on sys.path)

TARGET_MS = 0.2
ADMIN_KEY = "bench-admin-key-0123456789"
PG_ADMIN = os.environ.get("GW_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def config_for(variant: str, port: int, mock_port: int, tmp: Path, pg_url: str | None) -> dict[str, Any]:
    config = ov.gateway_config(port, mock_port)
    config["auth"]["admin_key"] = ADMIN_KEY
    if variant == "off":
        return config
    url = f"sqlite:///{tmp / 'gateway.db'}" if variant == "sqlite" else pg_url
    config["database"] = {"url": url}
    config["persistence"] = {"enabled": True, "spill_path": str(tmp / f"spill-{variant}.jsonl")}
    return config


def persistence_status(port: int) -> dict[str, Any] | None:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/admin/api/persistence", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def start_variant(
    stack: ExitStack, variant: str, tmp: Path, mock_port: int, pg_url: str | None, cpus: set[int]
) -> ov.Server:
    port = ov.free_port()
    work = tmp / f"{variant}-{port}"
    work.mkdir()
    config = work / "gateway.yaml"
    config.write_text(json.dumps(config_for(variant, port, mock_port, work, pg_url)))
    if variant != "off":
        subprocess.run([*ov.gwctl(), "db", "upgrade", "-c", str(config)], check=True, capture_output=True)
    cmd = [*ov.gwctl(), "serve", "-c", str(config)]
    gw = stack.enter_context(ov.started(ov.Server(f"gateway-{variant}", cmd, cpus, work, port, "/v1/models")))
    gw.wait_ready()
    return gw


async def sequential(port: int, raw: bytes, count: int) -> dict[str, Any]:
    """One request at a time on one connection (after count/10 unmeasured): no queueing, no idle
    connections for the server to close."""
    conn = await ov.connect(port)
    times: list[float] = []
    errors = 0
    for i in range(count + count // 10):
        sent = ov.now()
        status = await conn.send(raw)
        if status != 200:
            errors += 1
        elif i >= count // 10:
            times.append(conn.end - sent)
    conn.close()
    return {"times": times, "errors": errors, "p50_ms": ov.pct(times, 50), "p99_ms": ov.pct(times, 99)}


def create_pg_database() -> tuple[str, str] | None:
    try:
        import psycopg
    except ImportError:
        return None
    name = f"gwbench_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        print(f"PostgreSQL not available ({exc}); skipping that variant", file=sys.stderr)
        return None
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN)
    user, host, port = info.get("user", "postgres"), info.get("host", "127.0.0.1"), info.get("port", "5432")
    url = f"postgresql+psycopg://{user}@{host}:{port}/{name}"
    return name, url


def drop_pg_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_inprocess(args: argparse.Namespace, pg_url: str | None) -> dict[str, Any]:
    from _inprocess import measure

    variants = [v for v in args.variants if v != "postgresql" or pg_url is not None]
    with tempfile.TemporaryDirectory(prefix="gw-pbench-") as tmpdir:
        res = ov.run_async(measure(variants, Path(tmpdir), pg_url, args.requests, args.requests // 10))
    res["all_records_written"] = {v: n == res["records_expected"] for v, n in res["records_written"].items()}
    res["ok"] = (
        res["errors"] == 0
        and all(a < TARGET_MS for a in res["added_p50_ms"].values())
        and all(res["all_records_written"].values())
    )
    return res


def report_inprocess(res: dict[str, Any]) -> str:
    lines = [
        f"in-process paired A/B, {res['requests_per_variant']} requests per variant, interleaved",
        f"{'variant':>10}  {'p50 ms':>8}  {'p99 ms':>8}  {'added p50 ms':>12}  sinks (us/record)",
    ]
    for v, p50 in res["p50_ms"].items():
        added = res["added_p50_ms"].get(v)
        sinks = ", ".join(f"{k} {us:.2f}" for k, us in res["sink_us_per_record"][v].items())
        lines.append(
            f"{v:>10}  {p50:8.4f}  {res['p99_ms'][v]:8.3f}  {'' if added is None else f'{added:+12.4f}':>12}  {sinks}"
        )
    for v, added in res["added_p50_ms"].items():
        lines.append(
            f"{v}: added median {added * 1000:+.1f} us (target < {TARGET_MS} ms): "
            f"{'ok' if added < TARGET_MS else 'OVER'}; "
            f"records written {res['records_written'][v]}/{res['records_expected']}"
        )
    lines.append(f"client errors: {res['errors']}")
    return "\n".join(lines)


def run_servers(args: argparse.Namespace, pg_url: str | None) -> dict[str, Any]:
    """All variants' gateways run at once, pinned to the same CPU; blocks of load go to one at a
    time, variants interleaved round by round, with a pause after each block so a writer flushes
    its own backlog before the next variant's block. Samples are pooled per variant, so drift in
    the machine's load falls on every variant alike."""
    all_cpus = sorted(os.sched_getaffinity(0))
    gateway_cpus, load_cpus = {all_cpus[0]}, {all_cpus[-1]}
    os.sched_setaffinity(0, load_cpus)
    variants = [v for v in args.variants if v != "postgresql" or pg_url is not None]
    seq: dict[str, list[float]] = {v: [] for v in variants}
    ol: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    errors: dict[str, int] = dict.fromkeys(variants, 0)
    sent: dict[str, int] = dict.fromkeys(variants, 0)
    status: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="gw-pbench-") as tmpdir, ExitStack() as stack:
            tmp = Path(tmpdir)
            mock_port = ov.free_port()
            mock_cmd = [sys.executable, str(ov.HERE / "mock_upstream.py"), "--port", str(mock_port)]
            mock = stack.enter_context(ov.started(ov.Server("mock", mock_cmd, load_cpus, tmp, mock_port, "/v1/models")))
            mock.wait_ready()
            gateways = {v: start_variant(stack, v, tmp, mock_port, pg_url, gateway_cpus) for v in variants}
            raws = {v: ov.request_bytes("POST", ov.CHAT_PATH, gw.port, ov.CHAT) for v, gw in gateways.items()}
            for v, gw in gateways.items():  # warm-up
                ov.run_async(sequential(gw.port, raws[v], 200))
                sent[v] += 220
            busy = ov.wait_quiet(args.quiet_wait)
            for r in range(args.rounds):
                order = variants if r % 2 == 0 else variants[::-1]
                for v in order:
                    gw = gateways[v]
                    c0 = gw.cpu_s()
                    res = ov.run_async(sequential(gw.port, raws[v], args.sequential))
                    cpu[v].append((gw.cpu_s() - c0) / (args.sequential * 1.1) * 1000)
                    seq[v].extend(res["times"])
                    errors[v] += res["errors"]
                    sent[v] += args.sequential + args.sequential // 10
                    time.sleep(args.pause)
                    res = ov.run_async(open_loop_times(gw.port, raws[v], args.rate, args.duration))
                    ol[v].extend(res["times"])
                    errors[v] += res["errors"]
                    sent[v] += res["sent"]
                    time.sleep(args.pause)
                print(
                    f"round {r + 1}/{args.rounds}: "
                    + ", ".join(f"{v} seq p50 {statistics.median(seq[v]) * 1000:.3f} ms" for v in variants),
                    flush=True,
                )
            time.sleep(1.0)  # the writers' last batches
            for v, gw in gateways.items():
                if v != "off":
                    status[v] = persistence_status(gw.port)
                if errors[v]:
                    print(f"{v}: {errors[v]} client errors; gateway log tail:\n{gw.log_tail()}", file=sys.stderr)
    finally:
        os.sched_setaffinity(0, set(all_cpus))
    summary = {
        v: {
            "seq_p50_ms": statistics.median(seq[v]) * 1000,
            "seq_p99_ms": ov.pct(seq[v], 99),
            "open_p50_ms": statistics.median(ol[v]) * 1000 if ol[v] else float("nan"),
            "open_p99_ms": ov.pct(ol[v], 99),
            "cpu_ms_per_req": statistics.median(cpu[v]),
            "samples": len(seq[v]) + len(ol[v]),
        }
        for v in variants
    }
    added = {
        v: {k: summary[v][k] - summary["off"][k] for k in ("seq_p50_ms", "open_p50_ms", "cpu_ms_per_req")}
        for v in variants
        if v != "off"
    }
    written = {v: (st or {}).get("written") for v, st in status.items()}
    complete = {v: written[v] == sent[v] - errors[v] for v in written}
    ok = all(max(a["seq_p50_ms"], a["open_p50_ms"]) < TARGET_MS for a in added.values()) and all(complete.values())
    return {
        "meta": {
            "rate": args.rate,
            "block_s": args.duration,
            "sequential_per_block": args.sequential,
            "rounds": args.rounds,
            "busy_cores_at_start": busy,
            "cpus": len(all_cpus),
        },
        "summary": summary,
        "added": added,
        "records_written": written,
        "records_sent": sent,
        "all_records_written": complete,
        "errors": errors,
        "ok": ok,
    }


async def open_loop_times(port: int, raw: bytes, rate: float, duration: float) -> dict[str, Any]:
    """bench/overhead.py's open loop, keeping the raw latencies (seconds) to pool across blocks."""
    conns = [await ov.connect(port) for _ in range(4)]
    idle = list(conns)
    times: list[float] = []
    errors = 0
    pending: set[asyncio.Task[None]] = set()

    async def fire(scheduled: float) -> None:
        nonlocal errors
        conn = idle.pop() if idle else await ov.connect(port)
        try:
            status = await conn.send(raw)
        except OSError:
            errors += 1
            return
        idle.append(conn)
        if status == 200:
            times.append(conn.end - scheduled)
        else:
            errors += 1

    total = int(rate * duration)
    start = ov.now() + 0.005
    for i in range(total):
        at = start + i / rate
        if (delay := at - ov.now()) > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(fire(at))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending, timeout=30)
    for conn in idle:
        conn.close()
    return {"times": times, "errors": errors, "sent": total}


def report_servers(res: dict[str, Any]) -> str:
    m = res["meta"]
    lines = [
        f"servers: all gateways up at once on one CPU; {m['rounds']} interleaved rounds of {m['sequential_per_block']} "
        f"sequential requests and {m['block_s']:g} s open loop at {m['rate']:g} req/s per variant "
        f"(busy cores at start: {m['busy_cores_at_start']:.2f})",
        f"{'variant':>10}  {'seq p50':>8}  {'seq p99':>8}  {'open p50':>8}  {'open p99':>8}  {'cpu/req':>8}  (ms)",
    ]
    for v, s in res["summary"].items():
        lines.append(
            f"{v:>10}  {s['seq_p50_ms']:8.3f}  {s['seq_p99_ms']:8.3f}  {s['open_p50_ms']:8.3f}  "
            f"{s['open_p99_ms']:8.3f}  {s['cpu_ms_per_req']:8.3f}"
        )
    for v, a in res["added"].items():
        worst = max(a["seq_p50_ms"], a["open_p50_ms"])
        lines.append(
            f"{v}: added median {a['seq_p50_ms'] * 1000:+.0f} us sequential, "
            f"{a['open_p50_ms'] * 1000:+.0f} us open loop, "
            f"cpu {a['cpu_ms_per_req'] * 1000:+.0f} us/request (target < {TARGET_MS} ms): "
            f"{'ok' if worst < TARGET_MS else 'OVER'}; records written {res['records_written'][v]}/"
            f"{res['records_sent'][v] - res['errors'][v]}"
        )
    lines.append(f"client errors: {res['errors']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Latency persistence adds to the gateway (off / SQLite / PostgreSQL).")
    p.add_argument("--rate", type=float, default=200.0, help="servers mode: open-loop rate (default 200 req/s)")
    p.add_argument(
        "--duration", type=float, default=1.5, help="servers mode: seconds per open-loop block (default 1.5)"
    )
    p.add_argument("--pause", type=float, default=0.7, help="servers mode: seconds after each block (default 0.7)")
    p.add_argument("--rounds", type=int, default=20, help="servers mode: interleaved rounds (default 20)")
    p.add_argument("--mode", choices=("both", "inprocess", "servers"), default="both")
    p.add_argument(
        "--sequential", type=int, default=300, help="servers mode: sequential requests per block (default 300)"
    )
    p.add_argument("--requests", type=int, default=3000, help="in-process requests per variant (default 3000)")
    p.add_argument(
        "--variants", default="off,sqlite,postgresql", help="comma-separated (default off,sqlite,postgresql)"
    )
    p.add_argument("--quick", action="store_true", help="short runs for a smoke test")
    p.add_argument("--quiet-wait", type=float, default=30.0, help="seconds to wait for a quiet machine (default 30)")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "off" not in args.variants:
        p.error("the variants must include off (the baseline)")
    if args.quick:
        args.duration, args.rounds, args.quiet_wait, args.requests, args.sequential = 1.0, 3, 5.0, 500, 100
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pg = create_pg_database() if "postgresql" in args.variants else None
    results: dict[str, Any] = {}
    try:
        if args.mode in ("both", "inprocess"):
            results["inprocess"] = run_inprocess(args, pg[1] if pg else None)
            print(report_inprocess(results["inprocess"]), flush=True)
        if args.mode in ("both", "servers"):
            results["servers"] = run_servers(args, pg[1] if pg else None)
            print(report_servers(results["servers"]), flush=True)
    finally:
        if pg is not None:
            drop_pg_database(pg[0])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
