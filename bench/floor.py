"""What one more Python hop costs on this machine: the floor under any Python gateway's latency.

    .venv/bin/python bench/floor.py              # 5 rounds, about 1 minute
    .venv/bin/python bench/floor.py --rounds 9 --gap-ms 10

Sequential chat requests, `--gap-ms` apart (10 ms: the gap at 100 req/s), through four targets in
turn in each round: the mock directly; `raw_proxy.py` (asyncio.Protocol and httptools, no
framework, one write per answer); `bare_proxy.py` (uvicorn and a raw ASGI app); the gateway. The
proxies and the gateway sit on the first CPU, the mock and this client on the second, as in
overhead.py. It prints each round's median latency per target and the median over rounds of
each proxy's per-round difference from the direct path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from critical_path import Client, paced
from loadgen import CHAT, MODELS
from overhead import gateway_config, gwctl, launch
from procs import Server, free_port, wait_quiet

HERE = Path(__file__).resolve().parent


def start_servers(stack: ExitStack, tmp: Path, proxy_cpus: set[int], load_cpus: set[int]) -> dict[str, Server]:
    """The targets by name, each started and answering before the next starts."""
    mock_port, raw_port, bare_port, gw_port = free_port(), free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{mock_port}"
    config = tmp / "gateway.yaml"
    config.write_text(json.dumps(gateway_config(gw_port, mock_port)))
    commands = {
        "direct": ([sys.executable, str(HERE / "mock_upstream.py"), "--port", str(mock_port)], load_cpus, mock_port),
        "raw proxy": ([sys.executable, str(HERE / "raw_proxy.py"), "--port", str(raw_port), "--upstream", upstream],
                      proxy_cpus, raw_port),
        "bare proxy": ([sys.executable, str(HERE / "bare_proxy.py"), "--port", str(bare_port), "--upstream", upstream],
                       proxy_cpus, bare_port),
        "gateway": ([*gwctl(), "serve", "-c", str(config)], proxy_cpus, gw_port),
    }
    return {name: launch(stack, Server(name.replace(" ", "-"), cmd, cpus, tmp, port, MODELS))
            for name, (cmd, cpus, port) in commands.items()}


def p50_us(port: int, count: int, gap: float) -> float:
    client = Client(port)
    try:
        timed = paced(client, CHAT, count, gap, "floor")
    finally:
        client.close()
    return statistics.median((got - sent) / 1000 for sent, got in list(timed.values())[count // 5:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--requests", type=int, default=300, help="requests per target per round (default 300)")
    p.add_argument("--gap-ms", type=float, default=10.0, help="gap between requests (default 10)")
    p.add_argument("--quiet-wait", type=float, default=30.0, help="wait up to this long for a quiet machine")
    args = p.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    proxy_cpus, load_cpus = {cpus[0]}, {cpus[-1]}
    os.sched_setaffinity(0, load_cpus)
    wait_quiet(args.quiet_wait)
    with tempfile.TemporaryDirectory(prefix="gw-floor-") as tmpdir, ExitStack() as stack:
        targets = start_servers(stack, Path(tmpdir), proxy_cpus, load_cpus)
        rounds: dict[str, list[float]] = {name: [] for name in targets}
        for i in range(args.rounds):
            for name, server in targets.items():
                rounds[name].append(p50_us(server.port, args.requests, args.gap_ms / 1000))
            print(f"round {i + 1}/{args.rounds}: " + ", ".join(f"{n} {r[-1]:.0f}" for n, r in rounds.items()), flush=True)
    print(f"\nmedian latency (µs), requests {args.gap_ms:g} ms apart; added = median over rounds of (target - direct)")
    for name in rounds:
        added = statistics.median(a - d for a, d in zip(rounds[name], rounds["direct"], strict=True))
        print(f"  {name:<12}{statistics.median(rounds[name]):>9.0f}   added {added:>+7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
