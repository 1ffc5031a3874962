"""Measure what the gateway adds on top of a direct upstream, in one run.

    .venv/bin/python bench/overhead.py                 # full run, about 2 minutes
    .venv/bin/python bench/overhead.py --quick         # smoke run, under 30 s
    .venv/bin/python bench/overhead.py --rates 25,100,200,500 --json out.json

It starts the mock upstream (bench/mock_upstream.py) and the gateway (`gwctl serve` with a generated
config), pins the gateway to the first CPU and the mock plus the load generator (this process and wrk)
to the second, and measures each target, the mock directly and the gateway in front of it:

- closed-loop saturation at 64 connections (wrk when installed, else the built-in client),
  and the server process's CPU time per request over each phase;
- open-loop latency at fixed rates, timed from each request's scheduled send time;
- sequential 50-chunk streams: time to the first body byte and to the end;
- streaming saturation at 64 connections; peak RSS; start-up time to the first 200 on /v1/models.

See bench/README.md for the targets and how to read the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import httptools

HERE = Path(__file__).resolve().parent
MODEL = "mock-model"
KEY = "bench-key-0123456789abcdef"
_REQUEST = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello, briefly."}], "max_tokens": 32}
CHAT = json.dumps(_REQUEST, separators=(",", ":")).encode()
STREAM = json.dumps({**_REQUEST, "stream": True}, separators=(",", ":")).encode()
CHAT_PATH = "/v1/chat/completions"
MODELS = "/v1/models"
# The targets: (result key, comparison, bound).
TARGETS = {
    "req_s": (">=", 3500.0),
    "cpu_ms_per_req": ("<=", 0.3),
    "added_p50_ms_at_100": ("<=", 0.5),
    "added_ttfb_p50_ms": ("<=", 0.5),
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
IDLE_REUSE_S = 4.0  # open loop: reuse a connection only this soon after its last reply
now = time.perf_counter


def request_bytes(method: str, path: str, port: int, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile in milliseconds of values in seconds (nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] * 1000


# -- processes ------------------------------------------------------------------------------


class Server:
    """A child process in its own session, pinned to `cpus`; `stop()` ends its whole group."""

    def __init__(self, name: str, cmd: list[str], cpus: set[int], workdir: Path, port: int, ready_path: str) -> None:
        self.name, self.log, self.port, self.ready_path = name, workdir / f"{name}.log", port, ready_path
        self.startup_s = float("nan")
        self.started = now()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
            )
        with suppress(ProcessLookupError):  # if it died at once, wait_ready says why
            os.sched_setaffinity(self.proc.pid, cpus)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Sets `startup_s`: seconds from launch to the first 200 on `ready_path`."""
        probe = request_bytes("GET", self.ready_path, self.port)
        while now() - self.started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    sock.sendall(probe)
                    if sock.recv(65536).startswith(b"HTTP/1.1 200"):
                        self.startup_s = now() - self.started
                        return
            except OSError:
                pass
            time.sleep(0.005)
        raise RuntimeError(f"{self.name} was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def cpu_s(self) -> float:
        """The process's CPU time: its CPU-time clock (exact), else utime + stime (in ticks)."""
        try:
            return time.clock_gettime(((~self.proc.pid) << 3) | 2)  # Linux: the process's CPUCLOCK_SCHED
        except OSError:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; then SIGKILL for anything it left in its group."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


@contextmanager
def started(server: Server) -> Iterator[Server]:
    try:
        yield server
    finally:
        server.stop()


def machine_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def own_cpu_s() -> float:
    t = os.times()  # children: wrk, once waited for
    return t.user + t.system + t.children_user + t.children_system


def wait_quiet(limit: float, threshold: float = 0.15) -> float:
    """Waits up to `limit` s for a 2 s window in which the machine uses under `threshold` cores."""
    deadline = now() + limit
    while True:
        start, busy = now(), machine_busy_s()
        time.sleep(2.0)
        cores = (machine_busy_s() - busy) / (now() - start)
        if cores < threshold or now() >= deadline:
            return cores
        print(f"waiting for the machine to be quiet: {cores:.2f} cores busy", flush=True)


@contextmanager
def cpu_meter(target: Server, ours: list[Server], out: dict[str, float]) -> Iterator[None]:
    """Fills `out` with the target's CPU seconds and the cores used by processes outside the bench."""
    start = (now(), target.cpu_s(), sum(s.cpu_s() for s in ours) + own_cpu_s(), machine_busy_s())
    yield
    wall = now() - start[0]
    out["server_cpu_s"] = target.cpu_s() - start[1]
    bench = sum(s.cpu_s() for s in ours) + own_cpu_s() - start[2]
    out["foreign_cores"] = max(0.0, (machine_busy_s() - start[3] - bench) / wall)


# -- load generation --------------------------------------------------------------------------


class Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; `send` writes a pre-built request and awaits the reply."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.status = 0
        self.first = self.end = 0.0
        self.body: list[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.end = now()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail(exc or ConnectionResetError("connection closed"))

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if not self.first:
            self.first = now()
        if self.body is not None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.end = now()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def send(self, raw: bytes, keep_body: bool = False) -> int:
        if self.transport is None:
            raise ConnectionResetError("connection closed")
        self.status, self.first, self.body = 0, 0.0, [] if keep_body else None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        await self.waiter
        return self.status

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(port: int) -> Conn:
    _, conn = await asyncio.get_running_loop().create_connection(Conn, "127.0.0.1", port)
    return conn


async def closed_loop(port: int, raw: bytes, conns: int, duration: float) -> dict[str, Any]:
    """Each connection sends its next request as soon as the previous one is answered."""
    latencies: list[float] = []
    errors = 0
    deadline = now() + duration

    async def worker() -> None:
        nonlocal errors
        conn = await connect(port)
        while (sent := now()) < deadline:
            try:
                status = await conn.send(raw)
            except OSError:
                errors += 1
                conn = await connect(port)
                continue
            if status == 200:
                latencies.append(conn.end - sent)
            else:
                errors += 1
        conn.close()

    began = now()
    await asyncio.gather(*(worker() for _ in range(conns)))
    wall = now() - began
    return {"sent": len(latencies) + errors, "requests": len(latencies), "errors": errors,
            "req_s": len(latencies) / wall,
            "p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99), "tool": "python"}


def wrk(port: int, body: bytes, conns: int, duration: float, tmp: Path) -> dict[str, Any]:
    script = tmp / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = [==[{body.decode()}]==]\n'
        f'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer {KEY}"\n'
    )
    seconds = max(1, round(duration))
    url = f"http://127.0.0.1:{port}{CHAT_PATH}"
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "10s", "--latency", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    found = re.search(r"(\d+) requests in", out)
    if found is None:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")
    errors = sum(int(n) for n in re.findall(r"(?:Non-2xx or 3xx responses|connect|read|write|timeout):? (\d+)", out))
    lat = {q: _wrk_ms(m.group(1)) for q in ("50", "99") if (m := re.search(rf"^\s+{q}%\s+(\S+)", out, re.M))}
    requests = int(found.group(1))
    return {"sent": requests, "requests": requests, "errors": errors,
            "req_s": float(re.findall(r"Requests/sec:\s+([\d.]+)", out)[0]),
            "p50_ms": lat.get("50", float("nan")), "p99_ms": lat.get("99", float("nan")), "tool": "wrk"}


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


async def open_loop(port: int, raw: bytes, rate: float, duration: float, warmup: float) -> dict[str, Any]:
    """Requests at fixed times whatever the replies; latency counts from the scheduled time."""
    idle = [await connect(port) for _ in range(4)]
    latencies: list[float] = []
    lags: list[float] = []
    failed: Counter[str] = Counter()
    live, peak, last_end = len(idle), len(idle), 0.0
    pending: set[asyncio.Task[None]] = set()

    def take() -> Conn | None:
        nonlocal live
        while idle:
            conn = idle.pop()
            if conn.transport is not None and now() - conn.end < IDLE_REUSE_S:
                return conn
            conn.close()  # the server may be closing it: keep-alive timeouts are often 5 s
            live -= 1
        return None

    async def fire(scheduled: float, measured: bool) -> None:
        nonlocal live, peak, last_end
        conn = take()
        if conn is None and live >= 1024:
            failed["over 1024 connections"] += measured
            return
        sent = now()
        try:
            if conn is None:
                live += 1
                peak = max(peak, live)
                conn = await connect(port)
            status = await conn.send(raw)
        except OSError as exc:
            live -= 1
            failed[type(exc).__name__] += measured
            return
        idle.append(conn)
        if not measured:
            return
        if status != 200:
            failed[f"status {status}"] += 1
            return
        latencies.append(conn.end - scheduled)
        lags.append(sent - scheduled)
        last_end = max(last_end, conn.end)

    skip = int(rate * warmup)
    total = skip + int(rate * duration)
    start = now() + 0.005
    for i in range(total):
        at = start + i / rate
        if (delay := at - now()) > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(fire(at, i >= skip))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        _, late = await asyncio.wait(pending, timeout=30)
        for task in late:
            task.cancel()
        failed["no reply in 30 s"] += len(late)
    for conn in idle:
        conn.close()
    first = start + skip / rate
    return {"rate": rate, "achieved": len(latencies) / max(last_end - first, 1e-9), "sent": total,
            "requests": len(latencies), "errors": sum(failed.values()),
            "error_kinds": {k: n for k, n in failed.items() if n}, "p50_ms": pct(latencies, 50),
            "p90_ms": pct(latencies, 90), "p99_ms": pct(latencies, 99), "lag_p50_ms": pct(lags, 50),
            "lag_p99_ms": pct(lags, 99), "peak_connections": peak}


async def sequential_streams(port: int, raw: bytes, count: int, warmup: int) -> dict[str, Any]:
    """One stream at a time on one connection: time to the first body byte and to the end."""
    conn = await connect(port)
    ttfb: list[float] = []
    total: list[float] = []
    events: set[int] = set()
    errors = 0
    for i in range(warmup + count):
        sent = now()
        status = await conn.send(raw, keep_body=True)
        body = b"".join(conn.body or ())
        if i < warmup:
            continue
        if status != 200 or not body.endswith(b"data: [DONE]\n\n"):
            errors += 1
            continue
        ttfb.append(conn.first - sent)
        total.append(conn.end - sent)
        events.add(body.count(b"data: "))
    conn.close()
    return {"sent": warmup + count, "streams": len(ttfb), "errors": errors, "events": sorted(events),
            "ttfb_p50_ms": pct(ttfb, 50), "ttfb_p99_ms": pct(ttfb, 99),
            "total_p50_ms": pct(total, 50), "total_p99_ms": pct(total, 99)}


def run_async(coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# -- the run ------------------------------------------------------------------------------------


def measure(target: Server, ours: list[Server], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    port = target.port

    def saturate(body: bytes, conns: int, duration: float) -> dict[str, Any]:
        if args.wrk:
            return wrk(port, body, conns, duration, tmp)
        return run_async(closed_loop(port, request_bytes("POST", CHAT_PATH, port, body), conns, duration))

    def metered(title: str, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Runs a phase, adding the server's CPU per request and the outside load to its results."""
        print(f"  {target.name}: {title}", flush=True)
        cpu: dict[str, float] = {}
        with cpu_meter(target, ours, cpu):
            out = phase()
        return {**out, **cpu, "cpu_ms_per_req": 1000 * cpu["server_cpu_s"] / max(out["sent"], 1)}

    chat, stream = request_bytes("POST", CHAT_PATH, port, CHAT), request_bytes("POST", CHAT_PATH, port, STREAM)
    print(f"  {target.name}: warmup", flush=True)
    run_async(sequential_streams(port, stream, 20, 0))
    saturate(CHAT, 16, args.warmup)
    result: dict[str, Any] = {"startup_s": target.startup_s}
    result["saturation"] = metered(f"saturation, 64 connections, {args.duration:g} s",
                                   lambda: saturate(CHAT, 64, args.duration))
    result["open_loop"] = {
        f"{rate:g}": metered(f"open loop at {rate:g} req/s",
                             lambda rate=rate: run_async(open_loop(port, chat, rate, args.duration, args.open_warmup)))
        for rate in args.rates
    }
    result["streams"] = metered(f"{args.streams} sequential streams",
                                lambda: run_async(sequential_streams(port, stream, args.streams, 10)))
    result["stream_saturation"] = metered("streaming saturation, 64 connections",
                                          lambda: saturate(STREAM, 64, max(1.0, args.duration / 2)))
    result["peak_rss_mb"] = target.peak_rss_mb()
    return result


def gateway_config(port: int, mock_port: int) -> dict[str, Any]:
    return {
        "server": {"port": port},
        "auth": {"keys": [{"name": "bench", "key": KEY}]},
        "providers": [{"name": "mock", "kind": "openai", "base_url": f"http://127.0.0.1:{mock_port}/v1"}],
        "deployments": [{"model": MODEL, "provider": "mock"}],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    gateway_cpus, load_cpus = {cpus[0]}, {cpus[-1]}
    if len(cpus) < 2:
        print("warning: one CPU only, so the gateway shares it with the mock and the load generator", file=sys.stderr)
    os.sched_setaffinity(0, load_cpus)  # this process, and wrk after it
    busy = wait_quiet(args.quiet_wait)
    meta = {"busy_cores_at_start": busy, "python": platform.python_version(), "cpus": len(cpus),
            "gateway_cpus": sorted(gateway_cpus),
            "load_cpus": sorted(load_cpus), "load_tool": "wrk" if args.wrk else "python",
            "duration_s": args.duration, "rates": args.rates, "quick": args.quick, "git": git_version()}
    with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        mock_port, gw_port = free_port(), free_port()
        mock_cmd = [sys.executable, str(HERE / "mock_upstream.py"), "--port", str(mock_port)]
        mock = stack.enter_context(started(Server("mock", mock_cmd, load_cpus, tmp, mock_port, MODELS)))
        mock.wait_ready()
        config = tmp / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(gw_port, mock_port)))  # JSON is YAML
        gw_cmd = [*gwctl(), "serve", "-c", str(config)]
        gateway = stack.enter_context(started(Server("gateway", gw_cmd, gateway_cpus, tmp, gw_port, MODELS)))
        gateway.wait_ready()
        print(f"mock on :{mock_port} (cpu {sorted(load_cpus)}), gateway on :{gw_port} (cpu {sorted(gateway_cpus)}), "
              f"gateway start-up {gateway.startup_s:.2f} s", flush=True)
        direct = measure(mock, [mock, gateway], args, tmp)
        through = measure(gateway, [mock, gateway], args, tmp)
        if gateway.proc.poll() is not None:
            raise RuntimeError(f"the gateway exited during the run:\n{gateway.log_tail()}")
    return {"meta": meta, "direct": direct, "gateway": through, "verdicts": verdicts(direct, through)}


def verdicts(direct: dict[str, Any], gw: dict[str, Any]) -> dict[str, Any]:
    at_100 = "100" in gw["open_loop"]
    values = {
        "req_s": gw["saturation"]["req_s"],
        "cpu_ms_per_req": gw["saturation"]["cpu_ms_per_req"],
        "added_p50_ms_at_100": (
            gw["open_loop"]["100"]["p50_ms"] - direct["open_loop"]["100"]["p50_ms"] if at_100 else None
        ),
        "added_ttfb_p50_ms": gw["streams"]["ttfb_p50_ms"] - direct["streams"]["ttfb_p50_ms"],
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
    d, g, v = res["direct"], res["gateway"], res["verdicts"]
    head = f"{'':36}{'direct':>11}{'gateway':>11}{'added':>11}{'ratio':>8}  target"
    lines = [head, "-" * (len(head) + 8)]
    for label, path, key in _expand(list(d["open_loop"])):
        dv, gv = _get(d, path), _get(g, path)
        verdict = ""
        if key in v:
            r = v[key]
            verdict = f"{r['target']:<10}{'n/a' if r['pass'] is None else 'PASS' if r['pass'] else 'FAIL'}"
        ratio = gv / dv if dv else float("nan")
        lines.append(f"{label:<36}{_num(dv):>11}{_num(gv):>11}{_num(gv - dv, '+'):>11}{ratio:>8.3f}  {verdict}")
    errors = {name: sum(p.get("errors", 0) for p in _phases(r)) for name, r in (("direct", d), ("gateway", g))}
    foreign = max(p.get("foreign_cores", 0.0) for r in (d, g) for p in _phases(r))
    events = sorted(set(d["streams"]["events"]) | set(g["streams"]["events"]))
    lines.append(lines[1])
    lines.append(f"errors: direct {errors['direct']}, gateway {errors['gateway']}; SSE events per stream: {events}; "
                 f"load tool: {res['meta']['load_tool']}; other load: {foreign:.2f} cores at most")
    if foreign > 0.2:
        lines.append("warning: other processes used CPU during the run; absolute figures are unreliable")
    return "\n".join(lines)


def _get(r: dict[str, Any], keys: tuple[str, ...]) -> float:
    for k in keys:
        r = r[k]
    return float(r)  # type: ignore[arg-type]


def _num(x: float, sign: str = "") -> str:
    digits = 0 if abs(x) >= 1000 else 1 if abs(x) >= 100 else 3
    return f"{x:{sign},.{digits}f}"


def _phases(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["saturation"], r["streams"], r["stream_saturation"], *r["open_loop"].values()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Gateway overhead against a direct mock upstream.")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per measured phase (default 10)")
    p.add_argument("--rates", default="25,100", help="open-loop rates in req/s, comma-separated (default 25,100)")
    p.add_argument("--quick", action="store_true", help="short phases for a smoke run (under 30 s)")
    p.add_argument("--streams", type=int, default=200, help="sequential streams to time (default 200)")
    p.add_argument("--no-wrk", dest="wrk", action="store_false", help="use the built-in closed-loop client")
    p.add_argument("--quiet-wait", type=float, default=60.0,
                   help="wait up to this many seconds for other load to stop before starting (default 60)")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    args = p.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    args.wrk = args.wrk and shutil.which("wrk") is not None
    args.warmup, args.open_warmup = 5.0, 2.0
    if args.quick:
        args.duration, args.streams, args.warmup, args.open_warmup, args.quiet_wait = 1.0, 50, 1.0, 0.5, 0.0
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
