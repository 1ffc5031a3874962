"""Concurrent streams on one bundled-engine replica: aggregate decode tokens/s, 1 stream vs N.

Starts one SmolLM2 replica (llama-server, `parallel` slots, continuous batching) through
`EngineSupervisor` and streams chat completions to it directly with httpx: first one stream at a
time, then N at once. Every stream decodes exactly `--tokens` tokens (`ignore_eos`, a llama-server
extension) so the rounds compare the same work. Aggregate tokens/s is all streams' completion
tokens over the wall time from the first request to the last token; per-stream tokens/s is each
stream's tokens after its first over its own decode time.

usage: python bench/engine_concurrency.py [--streams 4] [--tokens 128] [--rounds 2] [--threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers.engines import EngineSupervisor  # noqa: E402
from providers.engines.config import EngineConfig  # noqa: E402

PROMPTS = [
    "Write a long story about a dragon who lives in a river.",
    "Describe a journey across a desert, step by step.",
    "Explain how a steam engine works to a child.",
    "Write a letter from a lighthouse keeper to the sea.",
    "Tell the history of a small mountain village.",
    "Describe a busy market in the morning.",
    "Write a fable about a fox and a crow.",
    "Explain why the sky changes colour at sunset.",
]


async def stream(client: httpx.AsyncClient, prompt: str, tokens: int) -> dict[str, Any]:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0.8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = last = None
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"engine answered {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()):
                last = time.perf_counter()
                first = first or last
    completion = int(usage.get("completion_tokens") or 0)
    if first is None or last is None or not completion:
        raise RuntimeError(f"the stream produced nothing (usage {usage})")
    return {
        "started": started,
        "first": first,
        "last": last,
        "tokens": completion,
        "decode_tok_s": (completion - 1) / (last - first) if last > first else float("nan"),
    }


async def round_of(client: httpx.AsyncClient, streams: int, tokens: int, offset: int) -> dict[str, float]:
    prompts = [PROMPTS[(offset + i) % len(PROMPTS)] for i in range(streams)]
    results = await asyncio.gather(*(stream(client, p, tokens) for p in prompts))
    wall = max(r["last"] for r in results) - min(r["started"] for r in results)
    return {
        "aggregate_tok_s": sum(r["tokens"] for r in results) / wall,
        "per_stream_tok_s": statistics.median(r["decode_tok_s"] for r in results),
        "ttft_max_s": max(r["first"] - r["started"] for r in results),
        "finished": float(len(results)),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="engine threads (default: the supervisor's)")
    args = parser.parse_args()
    cfg = EngineConfig(parallel=max(4, args.streams), n_ctx=1024, n_threads=args.threads)
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (other work on the machine skews every figure)")
    print(f"one replica: parallel={cfg.parallel}, {args.tokens} tokens per stream, {args.rounds} rounds")
    async with EngineSupervisor(cfg, output_level=5) as engine:
        async with httpx.AsyncClient(base_url=engine.replicas[0].base_url.removesuffix("/v1"), timeout=600) as client:
            await stream(client, "warm up", 4)
            for streams in (1, args.streams):
                rounds = [await round_of(client, streams, args.tokens, r * streams) for r in range(args.rounds)]
                agg = [r["aggregate_tok_s"] for r in rounds]
                per = [r["per_stream_tok_s"] for r in rounds]
                print(
                    f"  {streams} stream(s): aggregate {statistics.median(agg):6.1f} tok/s {[round(a, 1) for a in agg]}"
                    f"  per stream {statistics.median(per):5.1f} tok/s  slowest TTFT {max(r['ttft_max_s'] for r in rounds):.2f}s"
                    f"  finished {int(sum(r['finished'] for r in rounds))}/{streams * args.rounds}"
                )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
