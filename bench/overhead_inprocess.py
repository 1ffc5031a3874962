"""The gateway's own CPU per request, in process: no sockets, no uvicorn, no other server.

    .venv/bin/python bench/overhead_inprocess.py                        # this checkout, 5 x 2000 requests
    .venv/bin/python bench/overhead_inprocess.py --requests 4000 --rounds 7 --concurrency 16
    .venv/bin/python bench/overhead_inprocess.py --compare /path/to/old/checkout --rounds 6

One process builds the app (`create_app` with its lifespan: memory state, persistence off) over
an in-process fake upstream that answers a chat completion at once (`_inprocess.upstream`), and
sends it `--requests` chat requests straight through ASGI (`--concurrency` at a time), after a
warm-up. Per round it prints the process's CPU time per request (user + system,
`time.process_time`) in microseconds and the requests per second of wall time. CPU time, unlike
wall time, is not stretched much by other load on the machine, so two code versions measured on
one busy machine can still be compared.

`--compare DIR` measures two checkouts: this script's directory's checkout and the one at DIR,
each round in a fresh process with that checkout's packages first on sys.path, the two alternating (A B B A
A B ...) so that the machine's drift falls on both alike. It prints both medians and the change.
The fake upstream's own cost is the same for both and included in both.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def measure(requests: int, warmup: int, concurrency: int) -> dict[str, Any]:
    from _inprocess import call, running, settings_for  # after `use_checkout`: its gateway runs

    with tempfile.TemporaryDirectory(prefix="gw-inproc-") as tmp:
        async with running(settings_for("off", Path(tmp), None)) as (app, state):
            errors = 0

            async def batch(start: int, n: int) -> None:
                nonlocal errors
                for i in range(start, start + n, concurrency):
                    width = min(concurrency, start + n - i)
                    results = await asyncio.gather(*(call(app, state, i + j) for j in range(width)))
                    errors += sum(status != 200 for status, _ in results)

            await batch(0, warmup)
            gc.collect()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await batch(warmup, requests)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "requests": requests,
        "concurrency": concurrency,
        "errors": errors,
        "cpu_us_per_req": 1e6 * cpu / requests,
        "req_s": requests / wall,
    }


def use_checkout(checkout: Path) -> str:
    """Put `checkout`'s packages first on the path (before an editable install of another one);
    returns where `gateway` is imported from."""
    sys.path.insert(0, str(checkout))
    import gateway

    where = str(Path(gateway.__file__).resolve().parent.parent)
    if Path(where) != checkout.resolve():
        raise SystemExit(f"gateway imported from {where}, not {checkout}")
    return where


def one_round(checkout: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh process, with `checkout`'s packages first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [
        sys.executable,
        str(Path(__file__)),
        "--json-line",
        "--requests",
        str(args.requests),
        "--warmup",
        str(args.warmup),
        "--concurrency",
        str(args.concurrency),
        "--rounds",
        "1",
        "--checkout",
        str(checkout),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"round in {checkout} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def compare(other: Path, args: argparse.Namespace) -> int:
    mine = HERE.parent
    sides = {"this": mine, "other": other}
    results: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = ["other", "this"] if r % 4 in (0, 3) else ["this", "other"]  # A B B A ...
        for side in order:
            res = one_round(sides[side], args)
            results[side].append(res)
            print(
                f"round {r + 1} {side:>5} ({sides[side]}): {res['cpu_us_per_req']:.1f} us CPU/request, "
                f"{res['req_s']:.0f} req/s, errors {res['errors']}",
                flush=True,
            )
    cpu = {s: statistics.median(x["cpu_us_per_req"] for x in rs) for s, rs in results.items()}
    rps = {s: statistics.median(x["req_s"] for x in rs) for s, rs in results.items()}
    pairs = [a["cpu_us_per_req"] / b["cpu_us_per_req"] for a, b in zip(results["this"], results["other"], strict=True)]
    print(f"\nmedians over {args.rounds} rounds of {args.requests} requests, concurrency {args.concurrency}:")
    print(f"  other ({other}): {cpu['other']:.1f} us CPU/request, {rps['other']:.0f} req/s")
    print(f"  this  ({mine}): {cpu['this']:.1f} us CPU/request, {rps['this']:.0f} req/s")
    print(
        f"  CPU per request, this / other: {cpu['this'] / cpu['other']:.3f} "
        f"(median of per-round ratios {statistics.median(pairs):.3f}, range {min(pairs):.3f}-{max(pairs):.3f})"
    )
    return 0 if all(x["errors"] == 0 for rs in results.values() for x in rs) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The gateway's CPU per request, in process, against a fake upstream.")
    p.add_argument("--requests", type=int, default=2000, help="measured requests per round (default 2000)")
    p.add_argument("--warmup", type=int, default=300, help="requests before measuring, per round (default 300)")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (default 1)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--compare", type=Path, metavar="DIR", help="another checkout to measure in alternating rounds")
    p.add_argument("--checkout", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    p.add_argument("--json-line", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.requests < 1 or args.rounds < 1 or args.concurrency < 1:
        p.error("--requests, --rounds and --concurrency must be at least 1")
    if args.compare is not None:
        return compare(args.compare.resolve(), args)
    where = use_checkout(args.checkout)
    if not args.json_line:
        print(f"gateway from {where}")
    rounds = []
    for r in range(args.rounds):
        res = asyncio.run(measure(args.requests, args.warmup, args.concurrency))
        rounds.append(res)
        if args.json_line:
            print(json.dumps(res))
        else:
            print(
                f"round {r + 1}: {res['cpu_us_per_req']:.1f} us CPU/request, {res['req_s']:.0f} req/s, "
                f"errors {res['errors']}",
                flush=True,
            )
    if not args.json_line and len(rounds) > 1:
        print(
            f"median: {statistics.median(x['cpu_us_per_req'] for x in rounds):.1f} us CPU/request, "
            f"{statistics.median(x['req_s'] for x in rounds):.0f} req/s"
        )
    return 0 if all(x["errors"] == 0 for x in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
