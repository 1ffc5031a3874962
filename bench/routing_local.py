"""Real local replicas: the multi-turn agent workload, scaled down, through the gateway in front of
2 llama.cpp replicas (SmolLM2-135M, one thread each), `score` (ours) vs `round_robin`.

Each policy gets a fresh `gwctl serve` with fresh engines (cold caches). Sessions have their own
system prompt (~1.2k tokens) and grow by a short user turn plus the model's answer each turn; the
turns of the sessions are interleaved in a seeded random order and sent one at a time (2 cores:
concurrent requests would measure CPU contention, not routing). TTFT is measured by the client on
the stream; cache hits are the `cached_tokens` llama-server reports in each stream's usage chunk
(hit rate: cached / prompt tokens over all turns), which the gateway's affinity index also learns
from. Each replica has the default 4 slots (each keeps its last prompt's KV) and a RAM prompt cache.

usage: python bench/routing_local.py [--sessions 4] [--turns 4] [--policies score,round_robin] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
WORDS = ["repository", "build", "test", "deploy", "cache", "router", "gateway", "latency", "budget", "quality", "probe", "engine", "server", "replica", "stream", "window", "kernel", "memory", "thread", "signal", "process", "health", "backoff", "cost", "region", "function", "module", "class"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def system_prompt(rng: random.Random, words: int) -> str:
    return "You are a coding agent. Project notes: " + " ".join(rng.choice(WORDS) for _ in range(words))


async def start_gateway(policy: str, replicas: int, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "timeouts": {"first_byte": 300, "between_chunks": 300, "total": 600},
        "retry": {"attempts_per_endpoint": 1},
        "routing": {"policy": policy},
        "engines": [
            {
                "name": "local",
                "kind": "llamacpp",
                "model": "smollm2",
                "served_model_name": MODEL,
                "replicas": replicas,
                "n_ctx": 4096,
                "n_threads": 1,
            }
        ],
    }
    path = tmp / f"gateway-{policy}.json"
    path.write_text(json.dumps(config))
    # Popen returns at once (the child runs on its own); readiness is polled below without blocking.
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli.gwctl", "serve", "-c", str(path)], cwd=REPO)  # noqa: ASYNC220
    root = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=root, timeout=5) as client:
        for _ in range(1800):
            if proc.poll() is not None:
                raise RuntimeError(f"gwctl serve exited with {proc.returncode}")
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return proc, root
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    proc.terminate()
    raise TimeoutError("the gateway and its engines did not become ready")


async def turn(client: httpx.AsyncClient, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    body = {
        "model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = None
    parts: list[str] = []
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code}: {(await response.aread())[:300]!r}")
        endpoint = response.headers.get("x-gateway-endpoint")
        route = response.headers.get("x-gateway-route", "")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = (choice.get("delta") or {}).get("content")
                if delta or choice.get("finish_reason"):
                    first = first or time.perf_counter()
                if delta:
                    parts.append(delta)
    if first is None:
        raise RuntimeError("nothing streamed")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return {
        "ttft_s": first - started, "endpoint": endpoint, "route": route, "answer": "".join(parts),
        "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached,
    }


async def run_policy(policy: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    rng = random.Random(args.seed)
    sessions = [[{"role": "system", "content": system_prompt(rng, args.system_words)}] for _ in range(args.sessions)]
    order = [s for s in range(args.sessions) for _ in range(args.turns)]
    rng.shuffle(order)
    proc, root = await start_gateway(policy, args.replicas, tmp)
    results = []
    try:
        async with httpx.AsyncClient(base_url=root, timeout=600) as client:
            done = [0] * args.sessions
            for s in order:
                messages = sessions[s]
                messages.append({"role": "user", "content": f"Step {done[s] + 1}: " + " ".join(rng.choice(WORDS) for _ in range(30))})
                out = await turn(client, messages, args.max_tokens)
                messages.append({"role": "assistant", "content": out["answer"]})
                results.append({
                    "session": s, "turn": done[s], "ttft_s": out["ttft_s"], "endpoint": out["endpoint"],
                    "route": out["route"], "prompt_tokens": out["prompt_tokens"], "cached_tokens": out["cached_tokens"],
                })
                done[s] += 1
                print(
                    f"  {policy:<12} session {s} turn {done[s] - 1}: {out['endpoint']} TTFT {out['ttft_s']:.2f}s"
                    f" cached {out['cached_tokens']}/{out['prompt_tokens']}",
                    file=sys.stderr,
                )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    later = [r["ttft_s"] for r in results if r["turn"] > 0]
    first = [r["ttft_s"] for r in results if r["turn"] == 0]
    all_ = sorted(r["ttft_s"] for r in results)
    moves = sum(
        1
        for s in {r["session"] for r in results}
        for a, b in zip([r for r in results if r["session"] == s], [r for r in results if r["session"] == s][1:])
        if a["endpoint"] != b["endpoint"]
    )
    prompt = sum(r["prompt_tokens"] or 0 for r in results)
    cached = sum(r["cached_tokens"] or 0 for r in results)
    return {
        "requests": len(results),
        "reported_cache": all(r["cached_tokens"] is not None for r in results),
        "cache_hit_rate": cached / prompt if prompt else None,
        "later_turns_hit_rate": (
            sum(r["cached_tokens"] or 0 for r in results if r["turn"] > 0)
            / max(1, sum(r["prompt_tokens"] or 0 for r in results if r["turn"] > 0))
        ),
        "ttft_p50_s": statistics.median(all_),
        "ttft_p90_s": all_[min(len(all_) - 1, int(0.9 * len(all_)))],
        "ttft_mean_s": statistics.mean(all_),
        "later_turns_p50_s": statistics.median(later) if later else None,
        "later_turns_mean_s": statistics.mean(later) if later else None,
        "first_turns_mean_s": statistics.mean(first) if first else None,
        "replica_changes_within_sessions": moves,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            results = await run_policy(policy, args, Path(tmp))
            report[policy] = {"summary": summary(results), "requests": results}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--system-words", type=int, default=900, help="about 1.2k tokens")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--policies", default="score,round_robin")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.sessions} sessions x {args.turns} turns, {args.replicas} llama-server replicas (SmolLM2-135M, 1 thread each), seed {args.seed}")
    print(
        f"{'policy':<12} {'hit rate':>9} {'later':>6} {'TTFT p50':>9} {'p90':>7} {'mean':>7} {'later turns p50':>16} {'mean':>7}"
        f" {'first turns mean':>17} {'replica changes':>16}"
    )
    for policy, r in report.items():
        s = r["summary"]
        print(
            f"{policy:<12} {s['cache_hit_rate'] or 0:>9.1%} {s['later_turns_hit_rate']:>6.1%} {s['ttft_p50_s']:>8.2f}s {s['ttft_p90_s']:>6.2f}s {s['ttft_mean_s']:>6.2f}s "
            f"{s['later_turns_p50_s']:>15.2f}s {s['later_turns_mean_s']:>6.2f}s {s['first_turns_mean_s']:>16.2f}s "
            f"{s['replica_changes_within_sessions']:>16}"
        )


if __name__ == "__main__":
    main()
