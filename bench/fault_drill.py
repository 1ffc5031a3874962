"""The fault drill: gateway replicas behind a balancer (nginx with deploy/nginx.conf, or HAProxy with
deploy/haproxy.cfg) sharing a private Redis and a private PostgreSQL that the drill starts itself
(never the machine's shared ones), in front of a faulty fake upstream (5xx, connection resets, slow
first bytes, mid-stream cuts) and two healthy ones, under open-loop load with streams, through a
timeline of faults:

    upstream SIGKILL and return   one healthy upstream dies, comes back half a phase later
    Redis SIGKILL and restart     the shared routing state goes away, comes back empty
    PostgreSQL immediate stop     `pg_ctl stop -m immediate`, started again 3 s later
    engine SIGKILL                (--no-engine: none) each replica also runs the bundled llama-server engine
                                  (2 engine replicas); streams go to it through the phase, and one
                                  engine replica of the first gateway is SIGKILLed a third in (once
                                  it reports a stream in flight); the gateway restarts it
    rolling restart               SIGTERM, wait for the exit, start again, for every replica in turn

It prints, per phase, the requests sent, the client-visible errors by cause, latency p50/p99 and
what each phase added over the baseline's; then request records written against requests
answered (every answered request's x-request-id must have exactly one row). A healthy candidate
exists throughout, so the target is 0 errors, except for a stream cut after its first event (by
the faulty upstream, or on the killed engine): a committed stream cannot move to another endpoint,
and ends with an error event. The engine's streams are counted apart (their own row), and the load
generator's achieved rate is printed against the offered one (a starved generator offers less).

    python bench/fault_drill.py                    # 2 replicas, 200 req/s, 30% streams, 20 s phases
    python bench/fault_drill.py --short            # CI's form: 50 req/s, 5 s phases (~50 s of load)
    python bench/fault_drill.py --json out.json    # also write the figures (tests/ops/test_fault_drill.py)
    python bench/fault_drill.py --balancer haproxy --no-engine
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import yaml  # noqa: E402

from tests.ops.cluster import (  # noqa: E402
    BALANCERS,
    ROOT,
    FakeUpstream,
    Gateway,
    Postgres,
    Redis,
    free_port,
    make_balancer,
)
from tests.ops.load import Load, Outcome  # noqa: E402

KEY = "sk-fault-drill-0001"
ADMIN_KEY = "sk-fault-drill-admin-0002"
ENGINE_MODEL = "smollm2-135m-instruct"
PROMPT = "the fault drill asks for a short answer"
# The faulty upstream: shares of its requests that fail, and how.
FAULTS = ["0.2=status:500", "0.05=reset", "0.05=slow:3", "0.05=cut:3"]
# A committed stream that breaks ends with the gateway's error event (gateway/pipeline/stream.py).
CUT_AFTER_COMMIT = "stream cut after commit"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def config(upstreams: dict[str, FakeUpstream], redis: Redis, pg: Postgres, drain_delay: float,
           engine: bool) -> dict[str, Any]:
    # The engine: two replicas of the shipped SmolLM2 per gateway, one thread each (a small model
    # and a few streams a second; more threads would fight the drill's other processes), 4 slots
    # each, so the survivor of a kill takes the victim's streams without queueing them.
    engines = [{"name": "local", "model": "smollm2", "served_model_name": ENGINE_MODEL, "replicas": 2,
                "n_ctx": 1024, "parallel": 4, "n_threads": 1, "restart_backoff_initial": 0.5}]
    # First byte within 1 s: the faulty upstream's 3 s stalls time out and move on. With the engine,
    # the product's defaults (60 s) instead: the drill saturates the CPU, and a CI machine busy with
    # other work starved the engine's streams past every tighter bound tried (a first token over 1 s,
    # then over 2 s, then over 10 s, with the load generator itself 9 s late at p99); the drill is about
    # failing over, not the engine's speed. The stalls then cost their 3 s, which the latency columns show.
    first_byte, between_chunks, total = (60.0, 60.0, 120.0) if engine else (1.0, 2.0, 30.0)
    return {
        "server": {"shutdown_timeout_s": 15, "drain_delay_s": drain_delay, "log_level": "warning"},
        "auth": {"keys": [{"name": "drill", "key": KEY}], "admin_key": ADMIN_KEY},
        "timeouts": {"connect": 0.5, "first_byte": first_byte, "between_chunks": between_chunks, "total": total},
        "retry": {"attempts_per_endpoint": 1, "max_attempts": 4, "backoff_base": 0.01, "backoff_max": 0.05},
        "state_store": {"backend": "redis", "url": redis.url, "key_prefix": "drill:"},
        "persistence": {"enabled": True, "flush_interval": 0.2},
        "database": {"url": pg.url},
        "providers": [{"name": name, "kind": "openai", "base_url": up.url} for name, up in upstreams.items()],
        "deployments": [{"model": "m", "provider": name, "upstream_model": "m"} for name in upstreams],
        "engines": engines if engine else [],
    }


class Drill:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.dir = args, workdir
        self.redis = Redis(free_port(), workdir)
        self.pg = Postgres(free_port())
        self.upstreams = {
            "faulty": FakeUpstream("faulty", free_port(), workdir, ["--chunk-delay", "0.02", "--seed", "7",
                                                                       *(a for f in FAULTS for a in ("--fault", f))]),
            "healthy-a": FakeUpstream("healthy-a", free_port(), workdir, ["--chunk-delay", "0.02"]),
            "healthy-b": FakeUpstream("healthy-b", free_port(), workdir, ["--chunk-delay", "0.02"]),
        }
        path = workdir / "gateway.yaml"
        path.write_text(yaml.safe_dump(config(self.upstreams, self.redis, self.pg, args.drain_delay, args.engine)))
        self.config = path
        self.gateways = [
            Gateway(f"gw{i}", path, free_port(), workdir, {"GW_PERSISTENCE__SPILL_PATH": str(workdir / f"spill{i}.jsonl")})
            for i in range(args.replicas)
        ]
        self.balancer = make_balancer(args.balancer, free_port(), [g.port for g in self.gateways], workdir)
        self.phases: list[tuple[str, float]] = []  # (name, start)
        self.notes: list[str] = []
        self.engine_outcomes: list[Outcome] = []
        self.engine_kill: dict[str, float] = {}  # monotonic times: the SIGKILL, the restarted replica ready
        self.loadgen_cores = 0.0  # the drill's own CPU during the load (the generator and its SDK clients)

    def start(self) -> None:
        self.redis.start().wait_ready()
        self.pg.init().start()
        subprocess.run([sys.executable, "-m", "gateway.cli.gwctl", "db", "upgrade", "-c", str(self.config)], cwd=ROOT,
                       check=True, capture_output=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        for up in self.upstreams.values():
            up.start()
        for up in self.upstreams.values():
            up.wait_ready()
        for gw in self.gateways:
            gw.start()
        self.startup_s = max(gw.wait_ready(180) for gw in self.gateways)
        self.balancer.start().wait_ready()
        for gw in self.gateways:
            self.balancer.wait_in_rotation(gw.port, 60)

    def stop(self) -> None:
        for proc in (self.balancer, *self.gateways, *self.upstreams.values(), self.redis):
            proc.stop(grace=30)
        self.pg.cleanup()

    def mark(self, name: str) -> None:
        self.phases.append((name, time.monotonic()))
        print(f"  {time.strftime('%H:%M:%S')} {name}", flush=True)

    def snapshot(self) -> dict[str, float]:
        """Counters for what one request costs the shared services and a replica (read in the baseline)."""
        info = redis_info(self.redis.port)
        pg = self.pg.psql("select xact_commit, tup_inserted, pg_current_wal_lsn() - '0/0' from pg_stat_database "
                          "where datname = 'postgres'").split("|")
        gw_pids = [gw.proc.pid for gw in self.gateways if gw.proc is not None]
        return {
            "t": time.monotonic(),
            "redis_commands": info["total_commands_processed"],
            "redis_in_bytes": info["total_net_input_bytes"], "redis_out_bytes": info["total_net_output_bytes"],
            "pg_commits": float(pg[0]), "pg_rows": float(pg[1]), "pg_wal_bytes": float(pg[2]),
            "gw_cpu_s": sum(cpu_s(pid) for pid in gw_pids),
            "gw_rss_mb": max(tree_rss_mb(pid) for pid in gw_pids),
        }

    async def timeline(self, stop: asyncio.Event) -> None:
        phase = self.args.phase
        self.mark("baseline")
        await asyncio.sleep(1.0)  # past the first requests' warm-up
        self.cost_window = [await asyncio.to_thread(self.snapshot)]
        await asyncio.sleep(phase - 1.0)
        self.cost_window.append(await asyncio.to_thread(self.snapshot))

        self.mark("upstream SIGKILL")
        victim = self.upstreams["healthy-a"]
        victim.signal(signal.SIGKILL)
        await asyncio.sleep(phase / 2)
        victim.start()
        await asyncio.to_thread(victim.wait_ready)
        await asyncio.sleep(phase / 2)

        self.mark("Redis SIGKILL")
        self.redis.signal(signal.SIGKILL)
        await asyncio.sleep(2.0)
        self.redis.start()
        await asyncio.to_thread(self.redis.wait_ready)
        await asyncio.sleep(max(0.0, phase - 2.0))

        self.mark("PostgreSQL immediate stop")
        await asyncio.to_thread(self.pg.stop, "immediate")
        await asyncio.sleep(3.0)
        await asyncio.to_thread(self.pg.start)
        await asyncio.sleep(max(0.0, phase - 3.0))

        if self.args.engine:
            self.mark("engine SIGKILL")
            await self.engine_phase(phase)

        self.mark("rolling restart")
        restart_timeout = max(60.0, 10 * self.startup_s)
        for gw in self.gateways:
            gw.signal(signal.SIGTERM)
            rc = await asyncio.to_thread(gw.wait, self.args.drain_delay + 30)
            if rc != 0:
                self.notes.append(f"{gw.name} exited with {rc} on SIGTERM")
            gw.start()
            await asyncio.to_thread(gw.wait_ready, restart_timeout)
            await asyncio.to_thread(self.balancer.wait_in_rotation, gw.port, restart_timeout)
            await asyncio.sleep(1.0)
        self.mark("after")
        await asyncio.sleep(phase / 2)
        stop.set()

    def engine_replicas(self, gw: Gateway) -> list[dict[str, Any]]:
        r = httpx.get(gw.url + "/admin/api/engines", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5)
        r.raise_for_status()
        (engine,) = r.json()["data"]
        return list(engine["replicas"])

    async def engine_phase(self, phase: float) -> None:
        """Streams to the engine through the whole phase; a third in, SIGKILL of the first gateway's
        engine replica 0 (when it has a stream in flight), then wait for its supervisor to have
        restarted it (ready, one restart more)."""
        stop = asyncio.Event()
        load = Load(self.balancer.url, KEY, ENGINE_MODEL, self.args.engine_rate, stream_share=1.0, timeout=150,
                    prompt=PROMPT, max_tokens=self.args.engine_tokens, outcomes=self.engine_outcomes)
        traffic = asyncio.create_task(load.run(3600, stop))
        start = time.monotonic()
        await asyncio.sleep(phase / 3)
        gw = self.gateways[0]
        # The kill, once the victim reports a stream in flight (its load, polled by the supervisor),
        # or a third of the phase later anyway.
        deadline = time.monotonic() + phase / 3
        while True:
            before = (await asyncio.to_thread(self.engine_replicas, gw))[0]
            if (before["load"] or {}).get("processing", 0) > 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        self.engine_kill["sigkill"] = time.monotonic()
        self.engine_kill["victim_processing"] = float((before["load"] or {}).get("processing", 0))
        os.kill(before["pid"], signal.SIGKILL)

        def back() -> bool:
            now = self.engine_replicas(gw)[0]
            return bool(now["state"] == "ready" and now["restarts"] > before["restarts"] and now["pid"] != before["pid"])

        await asyncio.to_thread(gw.wait_until, back, 120, "serving with its engine replica restarted")
        self.engine_kill["ready"] = time.monotonic()
        await asyncio.sleep(max(1.0, phase - (self.engine_kill["ready"] - start)))
        stop.set()
        await traffic

    async def run_load(self) -> list[Outcome]:
        stop = asyncio.Event()
        load = Load(self.balancer.url, KEY, "m", self.args.rate, stream_share=self.args.streams, timeout=60, prompt=PROMPT)
        outcomes, _ = await asyncio.gather(load.run(3600, stop), self.timeline(stop))
        return outcomes

    def records(self) -> Counter[str]:
        """request_id -> rows in request_log, after every replica has stopped (and so flushed)."""
        out = self.pg.psql("select request_id from request_log")
        return Counter(line for line in out.splitlines() if line)


def redis_info(port: int) -> dict[str, float]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        return {k: float(v) for k, v in client.info("stats").items() if isinstance(v, int | float)}
    finally:
        client.close()


def cpu_s(pid: int) -> float:
    """utime + stime of the process and its waited-for children (the persistence worker is not waited for)."""
    total = 0.0
    for p in gateway_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def gateway_tree(pid: int) -> list[int]:
    """The gateway and its children but its engines (the persistence worker is the gateway's)."""
    return [pid, *(c for c in children(pid) if not _comm(c).startswith("llama-server"))]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def tree_rss_mb(pid: int) -> float:
    total = 0.0
    for p in gateway_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def costs(drill: Drill, outcomes: list[Outcome]) -> dict[str, float]:
    """Per request answered in the baseline window: Redis commands and bytes, PostgreSQL commits,
    rows and WAL bytes, gateway CPU; and a replica's resident memory (gateway and its worker)."""
    first, last = drill.cost_window
    n = sum(1 for o in outcomes if first["t"] <= o.end < last["t"])
    per = {k: (last[k] - first[k]) / max(n, 1) for k in first if k not in ("t", "gw_rss_mb")}
    per["gw_cpu_ms"] = per.pop("gw_cpu_s") * 1000
    # Redis traffic is mostly the replicas' periodic sync, not per request: per replica and second too.
    seconds = last["t"] - first["t"]
    per_s = (last["redis_commands"] - first["redis_commands"]) / seconds / len(drill.gateways)
    return {**per, "requests": n, "replica_rss_mb": last["gw_rss_mb"], "redis_commands_per_replica_s": per_s}


def seen(o: Outcome) -> float:
    """When the client saw the outcome: its end, or for one still going when the load stopped
    waiting, its start (its phase, not the one the drill had reached by then)."""
    return o.start if o.cause == "unfinished" else o.end


def classify(o: Outcome) -> str | None:
    if o.cause is None:
        return None
    # The gateway's error event for a committed stream whose upstream broke (its first event, often
    # only the role, already went out): nothing else could have answered it.
    if o.stream and o.cause == "error event" and "stream broke off" in o.detail:
        return CUT_AFTER_COMMIT
    return o.cause


def balancer_errors(workdir: Path, last: int = 10) -> list[str]:
    """nginx's own account of the upstream errors it answered (its error log's last lines), for a
    client-visible 502: a reset, a refused connection, a premature close."""
    log = workdir / "nginx-error.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line[:400] for line in lines if "[error]" in line][-last:]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def engine_summary(drill: Drill) -> dict[str, Any]:
    """The engine's streams: errors by cause, latency, and what the SIGKILL did (restart time, what
    was in flight on it, what was sent while it was down)."""
    outs = drill.engine_outcomes
    kill, ready = drill.engine_kill["sigkill"], drill.engine_kill["ready"]
    down = [o for o in outs if kill <= o.start < ready]
    ok = [(o.end - o.start) * 1000 for o in outs if o.ok]
    return {
        "sent": len(outs), "answered": sum(1 for o in outs if o.ok),
        "errors": dict(Counter(c for o in outs if (c := classify(o)) is not None)),
        "p50_ms": pct(ok, 0.5), "p99_ms": pct(ok, 0.99), "restart_s": ready - kill,
        "in_flight_at_kill": sum(1 for o in outs if o.in_flight_at(kill)),
        "victim_processing": drill.engine_kill["victim_processing"],  # its own last report
        "sent_while_down": len(down), "errors_while_down": dict(Counter(c for o in down if (c := classify(o)) is not None)),
    }


def summarize(drill: Drill, outcomes: list[Outcome], records: Counter[str], faults: dict[str, int]) -> dict[str, Any]:
    bounds = [*drill.phases, ("end", float("inf"))]
    phases = []
    for (name, start), (_, end) in zip(bounds, bounds[1:], strict=False):
        # Requests and latency by when they started; errors by when the client saw them.
        mine = [o for o in outcomes if start <= o.start < end]
        ok = [(o.end - o.start) * 1000 for o in mine if o.ok]
        errors = Counter(c for o in outcomes if start <= seen(o) < end and (c := classify(o)) is not None)
        phases.append({"phase": name, "sent": len(mine), "errors": dict(errors), "p50_ms": pct(ok, 0.5),
                       "p99_ms": pct(ok, 0.99), "start_lag_p99_ms": pct([(o.start - o.due) * 1000 for o in mine], 0.99)})
    base = phases[0]
    for p in phases:
        p["added_p50_ms"] = p["p50_ms"] - base["p50_ms"]
        p["added_p99_ms"] = p["p99_ms"] - base["p99_ms"]
    everything = outcomes + drill.engine_outcomes
    answered = {o.request_id for o in everything if o.ok}
    sent = {o.request_id for o in everything}
    errors = Counter(c for o in everything if (c := classify(o)) is not None)
    duration = (outcomes[-1].start - outcomes[0].start) if len(outcomes) > 1 else 0.0
    return {
        "rate": drill.args.rate, "replicas": drill.args.replicas, "streams": drill.args.streams,
        "balancer": drill.args.balancer, "duration_s": duration,
        # The generator keeps its schedule (open loop) unless its own CPU runs out: then it starts late.
        "achieved_rate": (len(outcomes) - 1) / duration if duration else 0.0,
        "start_lag_p99_ms": pct([(o.start - o.due) * 1000 for o in outcomes], 0.99),
        "loadgen_cores": drill.loadgen_cores,
        "engine": engine_summary(drill) if drill.args.engine else None,
        "sent": len(sent), "answered": len(answered), "errors": dict(errors),
        "avoidable_errors": sum(n for c, n in errors.items() if c != CUT_AFTER_COMMIT),
        "records": sum(records[i] for i in sent), "answered_without_record": len(answered - records.keys()),
        "duplicates": sum(1 for i in sent if records[i] > 1),
        "injected": faults, "phases": phases, "notes": drill.notes,
        "per_request": costs(drill, outcomes),
        # The avoidable ones first: the test prints them (a run with many cut streams kept none before).
        "error_samples": [{"cause": classify(o), "stream": o.stream, "detail": o.detail}
                          for o in sorted((o for o in everything if o.cause), key=lambda o: classify(o) == CUT_AFTER_COMMIT)][:20],
    }


def table(s: dict[str, Any]) -> str:
    rows = [f"{'phase':<26} {'sent':>6} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>7} {'+p99':>7} {'lag p99':>8}  errors by cause"]
    for p in s["phases"]:
        errors = ", ".join(f"{c}: {n}" for c, n in sorted(p["errors"].items())) or "0"
        rows.append(f"{p['phase']:<26} {p['sent']:>6} {p['p50_ms']:>8.1f} {p['p99_ms']:>8.1f} "
                    f"{p['added_p50_ms']:>+7.1f} {p['added_p99_ms']:>+7.1f} {p['start_lag_p99_ms']:>8.0f}  {errors}")
        if p["phase"] == "engine SIGKILL" and (e := s["engine"]):
            errors = ", ".join(f"{c}: {n}" for c, n in sorted(e["errors"].items())) or "0"
            rows.append(f"{'  its engine streams':<26} {e['sent']:>6} {e['p50_ms']:>8.1f} {e['p99_ms']:>8.1f} "
                        f"{'':>7} {'':>7} {'':>8}  {errors}")
    rows.append("")
    if e := s["engine"]:
        rows.append(f"engine SIGKILL: {e['in_flight_at_kill']} engine streams in flight ({e['victim_processing']:.0f} on "
                    f"the victim by its last report), the replica ready again after "
                    f"{e['restart_s']:.1f} s; {e['sent_while_down']} streams sent meanwhile, errors among them: "
                    f"{sum(e['errors_while_down'].values())}")
    rows.append(f"{s['replicas']} replicas behind {s['balancer']}, {s['rate']:g} req/s offered open loop "
                f"({s['achieved_rate']:.1f} achieved, start lag p99 {s['start_lag_p99_ms']:.0f} ms, the load generator "
                f"using {s['loadgen_cores']:.2f} cores), {s['streams']:.0%} streams, "
                f"{s['duration_s']:.0f} s: {s['sent']} sent, {s['answered']} answered, "
                f"{s['avoidable_errors']} errors with a healthy candidate, "
                f"{s['errors'].get(CUT_AFTER_COMMIT, 0)} streams cut after commit")
    rows.append(f"request records: {s['records']} for {s['sent']} requests sent; answered without a record: "
                f"{s['answered_without_record']}; duplicated: {s['duplicates']}")
    c = s["per_request"]
    rows.append(f"per request (baseline, {c['requests']:.0f} requests): Redis {c['redis_commands']:.2f} commands, "
                f"{c['redis_in_bytes']:.0f} B in, {c['redis_out_bytes']:.0f} B out "
                f"({c['redis_commands_per_replica_s']:.0f} commands/s per replica); PostgreSQL {c['pg_commits']:.3f} commits, "
                f"{c['pg_rows']:.2f} rows, {c['pg_wal_bytes']:.0f} B of WAL; gateway CPU {c['gw_cpu_ms']:.2f} ms; "
                f"a replica's RSS {c['replica_rss_mb']:.0f} MB")
    rows.append("faults the faulty upstream injected: " + ", ".join(f"{k} {v}" for k, v in sorted(s["injected"].items())))
    rows.extend(s["notes"])
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200.0, help="requests a second (open loop)")
    parser.add_argument("--streams", type=float, default=0.3, help="share of streamed requests")
    parser.add_argument("--phase", type=float, default=20.0, help="seconds per fault phase")
    parser.add_argument("--drain-delay", type=float, default=5.0, help="server.drain_delay_s of the replicas")
    parser.add_argument("--balancer", choices=BALANCERS, default="nginx")
    parser.add_argument("--engine", action=argparse.BooleanOptionalAction, default=True,
                        help="the engine SIGKILL phase (needs the bundled engine)")
    parser.add_argument("--engine-rate", type=float, default=2.0, help="engine streams a second in its phase")
    parser.add_argument("--engine-tokens", type=int, default=32, help="max_tokens of an engine stream")
    parser.add_argument("--short", action="store_true", help="CI's form: 50 req/s, 5 s phases")
    parser.add_argument("--json", type=Path, help="write the summary here too")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs, configs)")
    args = parser.parse_args()
    if args.short:
        args.rate, args.phase = 50.0, 5.0
    workdir = Path(tempfile.mkdtemp(prefix="fault-drill-"))
    drill = Drill(args, workdir)
    try:
        print(f"fault drill in {workdir}", flush=True)
        drill.start()
        cpu, wall = os.times(), time.monotonic()
        outcomes = asyncio.run(drill.run_load())
        done = os.times()
        drill.loadgen_cores = (done.user + done.system - cpu.user - cpu.system) / (time.monotonic() - wall)
        faults = httpx.get(f"http://127.0.0.1:{drill.upstreams['faulty'].port}/_faults", timeout=5).json()
        for gw in drill.gateways:  # each flushes its queued records on the way out
            gw.stop(grace=30)
        if not drill.pg.running:
            drill.pg.start()
        summary = summarize(drill, outcomes, drill.records(), faults)
        summary["balancer_errors"] = balancer_errors(workdir)
    except BaseException:
        for proc in (*drill.gateways, drill.balancer):
            print(f"--- {proc.name} log tail:\n{proc.log_tail()}", file=sys.stderr)
        raise
    finally:
        drill.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
