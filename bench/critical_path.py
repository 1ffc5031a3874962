"""Where one request's time goes through the gateway: each stage of its critical path, cold and warm.

    .venv/bin/python bench/critical_path.py              # about 30 s
    .venv/bin/python bench/critical_path.py --gap-ms 10 --requests 400 --json stamps.json

It starts the mock upstream and the gateway (`bench/_stamped_gateway.py`: `gwctl serve` with a
timestamp at each stage boundary), the gateway pinned to the first CPU and the mock and this client
to the second, as in overhead.py. The client sends requests one at a time on one keep-alive
connection: "cold" with `--gap-ms` between them (10 ms: the gap at 100 req/s) and "warm" back to
back, chat and streaming. Client and gateway read the same clock (CLOCK_MONOTONIC), so the
segments include the two socket hops. Each figure is the median over the requests, in
microseconds. The stamps cost about a microsecond each, so the total here runs a little above an
unstamped gateway's.

For a stream, the last rows end at the first body byte the client reads (the time to first byte
of overhead.py), and "upstream: first event" is the wait for the first event plus its
translation; the answer itself is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from loadgen import CHAT, CHAT_PATH, MODELS, STREAM, request_bytes
from overhead import gateway_config, launch
from procs import Server, free_port, started, wait_quiet

HERE = Path(__file__).resolve().parent
# (label, from stamp, to stamp); "client_sent" and "client_got" are the client's own.
COMMON = [
    ("client -> gateway socket (wake-up)", "client_sent", "recv"),
    ("HTTP parse, ASGI call (uvicorn)", "recv", "entry"),
    ("auth, request body", "entry", "body"),
    ("JSON parse", "body", "parsed"),
    ("validate", "parsed", "validated"),
    ("resolve the model", "validated", "resolved"),
    ("route: features", "resolved", "features"),
    ("route: filters, decision", "features", "decided"),
    ("route: limits, ticket", "decided", "routed"),
    ("dispatch, build the request", "routed", "upstream_sent"),
    ("upstream: to its headers", "upstream_sent", "upstream_headers"),
]
TO_CLIENT = ("gateway socket -> client (wake-up)", "sent2", "client_got")
CHAT_SEGMENTS = [
    *COMMON,
    ("upstream: body", "upstream_headers", "upstream_body"),
    ("parse the answer, commit", "upstream_body", "dispatched"),
    ("response headers", "dispatched", "send1"),
    ("writes (uvicorn)", "send1", "sent2"),
    TO_CLIENT,
]
STREAM_SEGMENTS = [
    *COMMON,
    ("upstream: first event", "upstream_headers", "dispatched"),
    ("stream set-up, response headers", "dispatched", "send1"),
    ("writes: headers, first chunk", "send1", "sent2"),
    TO_CLIENT,
]
# Off the critical path: for chat the accounting after the answer, for a stream the rest of it too.
AFTER = ("after the first answer bytes (off the path)", "sent2", "end")


class Client:
    """Sequential requests on one keep-alive connection, timed with the gateway's clock."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self.sock.close()

    def request(self, body: bytes, request_id: str, *, first_byte: bool = False) -> tuple[int, int]:
        """(sent, got) in monotonic ns: got is the first body byte with `first_byte` (streams),
        else the end of the answer."""
        raw = request_bytes("POST", CHAT_PATH, self.port, body, {"X-Request-Id": request_id})
        sent = time.monotonic_ns()
        self.sock.sendall(raw)
        buf, got = b"", 0
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("the server closed the connection")
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            if not got and len(buf) > end + 4:
                got = time.monotonic_ns()
            if not buf.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"answer: {buf[:200]!r}")
            if _complete(buf, end):
                return sent, (got if first_byte else time.monotonic_ns())


def _complete(buf: bytes, end: int) -> bool:
    head = buf[:end].lower()
    if b"content-length:" in head:
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        return len(buf) >= end + 4 + length
    return buf.endswith(b"0\r\n\r\n")


def paced(client: Client, body: bytes, count: int, gap: float, tag: str, *,
          first_byte: bool = False) -> dict[str, tuple[int, int]]:
    """`count` requests, each `gap` seconds after the previous one's scheduled time (spin for the
    last 2 ms, so the send is on time)."""
    out: dict[str, tuple[int, int]] = {}
    due = time.perf_counter()
    for i in range(count):
        due += gap
        while (left := due - time.perf_counter()) > 0:
            if left > 0.002:
                time.sleep(left - 0.002)
        rid = f"{tag}-{i}"
        out[rid] = client.request(body, rid, first_byte=first_byte)
    return out


def segments(timed: dict[str, tuple[int, int]], stamps: dict[str, dict[str, int]], rows: list[tuple[str, str, str]],
             skip: int) -> dict[str, float]:
    """Median microseconds per row, over the requests after the first `skip`."""
    keep = list(timed)[skip:]
    table: dict[str, float] = {}
    for label, start, stop in [*rows, AFTER, ("total, as the client sees it", "client_sent", "client_got")]:
        spans = []
        for rid in keep:
            points = {**stamps[rid], "client_sent": timed[rid][0], "client_got": timed[rid][1]}
            spans.append((points[stop] - points[start]) / 1000)
        table[label] = statistics.median(spans)
    return table


def run(args: argparse.Namespace) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    gateway_cpus, load_cpus = {cpus[0]}, {cpus[-1]}
    os.sched_setaffinity(0, load_cpus)
    wait_quiet(args.quiet_wait)
    with tempfile.TemporaryDirectory(prefix="gw-path-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        mock_port, gw_port = free_port(), free_port()
        launch(stack, Server("mock", [sys.executable, str(HERE / "mock_upstream.py"), "--port", str(mock_port)],
                             load_cpus, tmp, mock_port, MODELS))
        config = tmp / "gateway.yaml"
        config.write_text(json.dumps(gateway_config(gw_port, mock_port)))
        out = tmp / "stamps.json"
        gateway = Server("gateway", [sys.executable, str(HERE / "_stamped_gateway.py"), "--out", str(out), "--",
                                     "serve", "-c", str(config)], gateway_cpus, tmp, gw_port, MODELS)
        with started(gateway):
            gateway.wait_ready()
            timed: dict[str, dict[str, tuple[int, int]]] = {}
            direct: dict[str, dict[str, tuple[int, int]]] = {}
            for name, gap in (("cold", args.gap_ms / 1000), ("warm", 0.0)):
                for kind, body in (("chat", CHAT), ("stream", STREAM)):
                    for port, into in ((gw_port, timed), (mock_port, direct)):
                        client = Client(port)
                        try:
                            into[f"{name} {kind}"] = paced(client, body, args.requests, gap, f"{name}-{kind}",
                                                           first_byte=kind == "stream")
                        finally:
                            client.close()
        stamps = json.loads(out.read_text())
    skip = min(50, args.requests // 4)
    results: dict[str, Any] = {}
    for phase, reqs in timed.items():
        rows = STREAM_SEGMENTS if phase.endswith("stream") else CHAT_SEGMENTS
        results[phase] = segments(reqs, stamps, rows, skip)
        sent_got = list(direct[phase].values())[skip:]
        results[phase]["the mock directly"] = statistics.median((b - a) / 1000 for a, b in sent_got)
    return results


def report(results: dict[str, Any]) -> str:
    lines = []
    for kind in ("chat", "stream"):
        cold, warm = results[f"cold {kind}"], results[f"warm {kind}"]
        head = f"{kind + ' (µs, median)':<48}{'cold':>9}{'warm':>9}{'cold/warm':>11}"
        lines += [head, "-" * len(head)]
        for label in cold:
            c, w = cold[label], warm[label]
            lines.append(f"{label:<48}{c:>9.1f}{w:>9.1f}{(c / w if w > 0 else float('nan')):>11.1f}")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=400, help="requests per phase (default 400)")
    p.add_argument("--gap-ms", type=float, default=10.0, help="gap between cold requests (default 10: 100 req/s)")
    p.add_argument("--quiet-wait", type=float, default=30.0, help="wait up to this long for a quiet machine")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.requests < 8:
        p.error("--requests must be at least 8")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(args)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
