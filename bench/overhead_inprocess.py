"""The gateway's own CPU per request, in process: no sockets, no uvicorn, no other server.

    .venv/bin/python bench/overhead_inprocess.py                     # this checkout, 5 x 2000 requests
    .venv/bin/python bench/overhead_inprocess.py --requests 4000 --rounds 7 --concurrency 16
    .venv/bin/python bench/overhead_inprocess.py --compare /path/to/other/checkout --requests 500 --rounds 40

One process builds the app (`create_app` with its lifespan: memory state, persistence off) over
an in-process fake upstream that answers a chat completion at once (`_inprocess.upstream`), and
sends it `--requests` chat requests straight through ASGI (`--concurrency` at a time), after a
warm-up. Per round it prints the process's CPU time per request (user + system,
`time.process_time`) in microseconds and the requests per second of wall time. CPU time, unlike
wall time, is not stretched much by other load on the machine, so two code versions measured on
one busy machine can still be compared; the fake upstream's own small cost is in both.

`--compare DIR` measures two checkouts: `--checkout` (this script's own by default) and the one
at DIR, each in its own process with that checkout's packages first on sys.path, both started and
warmed up, then sent `--rounds` batches of `--requests` each in lockstep (A B, B A, A B ...), so
that other load on the machine, which comes and goes, falls on both alike. It prints each side's
median and lowest CPU per request and the median of the per-batch ratios.
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


class Gateway:
    """The app with its lifespan entered, over the fake upstream; `run` sends it requests."""

    def __init__(self, app: Any, state: dict[str, Any], concurrency: int) -> None:
        from _inprocess import call  # after `use_checkout`: that checkout's gateway runs

        self._call, self._app, self._state, self._concurrency = call, app, state, concurrency
        self._sent = 0

    async def run(self, n: int) -> dict[str, Any]:
        """`n` requests, `concurrency` at a time: CPU time per request, requests per second, errors."""
        errors, width = 0, self._concurrency
        gc.collect()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for start in range(0, n, width):
            batch = [self._call(self._app, self._state, self._sent + i) for i in range(min(width, n - start))]
            self._sent += len(batch)
            errors += sum(status != 200 for status, _ in await asyncio.gather(*batch))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        return {"requests": n, "errors": errors, "cpu_us_per_req": 1e6 * cpu / n, "req_s": n / wall}


async def serve(args: argparse.Namespace, rounds: int | None) -> list[dict[str, Any]]:
    """`rounds` rounds of `--requests`; or, with None, one batch per line read from stdin (a
    request count; the driver of --compare), each answered with one JSON line, until EOF."""
    from _inprocess import running, settings_for

    out = []
    with tempfile.TemporaryDirectory(prefix="gw-inproc-") as tmp:
        async with running(settings_for("off", Path(tmp), None)) as (app, state):
            gateway = Gateway(app, state, args.concurrency)
            await gateway.run(args.warmup)
            if rounds is None:
                print("ready", flush=True)
                while line := sys.stdin.readline().strip():  # blocks the loop between batches: idle
                    print(json.dumps(await gateway.run(int(line))), flush=True)
                return out
            for r in range(rounds):
                res = await gateway.run(args.requests)
                out.append(res)
                print(
                    f"round {r + 1}: {res['cpu_us_per_req']:.1f} us CPU/request, {res['req_s']:.0f} req/s, "
                    f"errors {res['errors']}",
                    flush=True,
                )
    return out


def use_checkout(checkout: Path) -> str:
    """Put `checkout`'s packages first on the path (before an editable install of another one);
    returns where `gateway` is imported from."""
    sys.path.insert(0, str(checkout))
    import gateway

    where = str(Path(gateway.__file__).resolve().parent.parent)
    if Path(where) != checkout.resolve():
        raise SystemExit(f"gateway imported from {where}, not {checkout}")
    return where


def start_child(checkout: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, str(Path(__file__)), "--serve", "--checkout", str(checkout),
           "--warmup", str(args.warmup), "--concurrency", str(args.concurrency)]  # fmt: skip
    child = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit(f"the gateway of {checkout} did not start")
    return child


def batch(child: subprocess.Popen[str], n: int) -> dict[str, Any]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(f"{n}\n")
    child.stdin.flush()
    return dict(json.loads(child.stdout.readline()))


def compare(other: Path, args: argparse.Namespace) -> int:
    """Both checkouts' gateways at once, each in its own process, sent batches in lockstep (A B,
    then B A, ...): the machine's load changes between batches fall on both alike."""
    sides = {"this": args.checkout.resolve(), "other": other}
    children = {side: start_child(path, args) for side, path in sides.items()}
    results: dict[str, list[dict[str, Any]]] = {"this": [], "other": []}
    try:
        for r in range(args.rounds):
            order = ["other", "this"] if r % 2 == 0 else ["this", "other"]
            for side in order:
                results[side].append(batch(children[side], args.requests))
    finally:
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
    cpu = {s: [x["cpu_us_per_req"] for x in rs] for s, rs in results.items()}
    rps = {s: statistics.median(x["req_s"] for x in rs) for s, rs in results.items()}
    ratios = sorted(a / b for a, b in zip(cpu["this"], cpu["other"], strict=True))
    print(f"{args.rounds} batches of {args.requests} requests each, concurrency {args.concurrency}, in lockstep:")
    for side in ("other", "this"):
        values = sorted(cpu[side])
        print(f"  {side:>5} ({sides[side]}): CPU/request median {statistics.median(values):.1f} us, "
              f"lowest {values[0]:.1f} us; {rps[side]:.0f} req/s (median)")  # fmt: skip
    q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
    print(f"  CPU per request, this / other: median of per-batch ratios {statistics.median(ratios):.3f} "
          f"(interquartile {q1:.3f}-{q3:.3f}); ratio of lowest {min(cpu['this']) / min(cpu['other']):.3f}")  # fmt: skip
    return 0 if all(x["errors"] == 0 for rs in results.values() for x in rs) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The gateway's CPU per request, in process, against a fake upstream.")
    p.add_argument("--requests", type=int, default=2000, help="measured requests per round or batch (default 2000)")
    p.add_argument("--warmup", type=int, default=300, help="requests before measuring, per round (default 300)")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (default 1)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (with --compare: batches per side) (default 5)")
    p.add_argument("--compare", type=Path, metavar="DIR", help="another checkout to measure in alternating rounds")
    p.add_argument("--checkout", type=Path, default=HERE.parent, help="the checkout to measure (default: this one)")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # a --compare child
    args = p.parse_args(argv)
    if args.requests < 1 or args.rounds < 1 or args.concurrency < 1:
        p.error("--requests, --rounds and --concurrency must be at least 1")
    if args.compare is not None:
        return compare(args.compare.resolve(), args)
    where = use_checkout(args.checkout)
    if args.serve:
        asyncio.run(serve(args, None))
        return 0
    print(f"gateway from {where}")
    rounds = asyncio.run(serve(args, args.rounds))
    if len(rounds) > 1:
        print(
            f"median: {statistics.median(x['cpu_us_per_req'] for x in rounds):.1f} us CPU/request, "
            f"{statistics.median(x['req_s'] for x in rounds):.0f} req/s"
        )
    return 0 if all(x["errors"] == 0 for x in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
