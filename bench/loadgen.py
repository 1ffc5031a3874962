"""Load generation for the bench scripts: pre-built requests, a raw HTTP/1.1 client, and the loops.

- `closed_loop` / `wrk`: saturation, each connection sending again as soon as it is answered;
- `open_loop`: requests at fixed times whatever the replies, latency counted from the scheduled time
  (sent on time to within microseconds while no reply is awaited: the lag is reported);
- `sequential_streams`: one stream at a time on one connection, time to first byte and to the end.

Latencies are returned in milliseconds (`pct` turns seconds into ms percentiles).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import httptools

MODEL = "mock-model"
KEY = "sk-bench-5f0c8e1a9b3d47e6a2c1f08d9e7b6a54"  # also LiteLLM's master key (--litellm)
_REQUEST = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello, briefly."}], "max_tokens": 32}
CHAT = json.dumps(_REQUEST, separators=(",", ":")).encode()
STREAM = json.dumps({**_REQUEST, "stream": True}, separators=(",", ":")).encode()
CHAT_PATH = "/v1/chat/completions"
MODELS = "/v1/models"
IDLE_REUSE_S = 4.0  # open loop: reuse a connection only this soon after its last reply
SPIN_S = 0.002  # open loop: the last stretch before a scheduled send is busy-waited, not slept
now = time.perf_counter


def request_bytes(method: str, path: str, port: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return (head + "\r\n").encode() + body


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile in milliseconds of values in seconds (nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))] * 1000


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
        # The loop's timers wake up to a millisecond late (epoll's timeout is in ms), which would
        # add a random lag of that size to every latency: sleep to just short of the time, then,
        # when no reply is awaited (spinning would delay reading it), spin to the exact time.
        if (delay := at - now()) > SPIN_S:
            await asyncio.sleep(delay - SPIN_S)
        if not pending:
            while now() < at:
                pass
        elif (delay := at - now()) > 0:
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
