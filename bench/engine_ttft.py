"""Measure the bundled engine: decode tokens/s and time to first token, cold vs prefix-cached.

Starts one SmolLM2 replica (llama-server) through `EngineSupervisor` (with and without
`prefix_cache`, i.e. llama-server's `--cache-prompt --cache-ram`) and talks to it directly with
httpx, streaming. Each case also prints the `cached_tokens` the engine reported.
With --via-gateway it runs `gwctl serve` (the gateway and its one engine replica, as a user does)
and sends the same requests through the gateway's /v1/chat/completions instead.

TTFT cases for a ~2k-token prompt (a long shared prefix plus a short question):
  cold         a prefix the engine has never seen
  warm-last    same prefix, new question, right after the previous request (live KV reuse)
  warm-evicted same prefix after unrelated long prompts replaced it in every slot (needs the RAM cache)

usage: python bench/engine_ttft.py [--runs 3] [--prompt-tokens 2000] [--n-ctx 4096] [--threads N] [--via-gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from providers.engines import EngineSupervisor  # noqa: E402
from providers.engines.config import EngineConfig  # noqa: E402

WORDS = (
    "river mountain engine cache token prefix router gateway latency budget quality probe model "
    "server replica stream window kernel memory thread signal process health backoff cost region"
).split()


def document(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def count_tokens(client: httpx.AsyncClient, text: str) -> int:
    response = await client.post("/tokenize", json={"content": text})
    return len(response.json()["tokens"])


async def stream_chat(client: httpx.AsyncClient, content: str, max_tokens: int) -> dict[str, float | int | None]:
    body = {
        "model": "smollm2-135m-instruct",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first = last = None
    tokens = 0
    usage = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"engine answered {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                # The first token may be end-of-turn (no content): it still ends the prefill.
                if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
                    last = time.perf_counter()
                    first = first or last
                    tokens += bool((choice.get("delta") or {}).get("content"))
    if first is None or last is None:
        raise RuntimeError(f"nothing streamed (usage {usage})")
    return {
        "ttft_s": first - started,
        "decode_tok_s": (tokens - 1) / (last - first) if tokens > 1 and last > first else float("nan"),
        "tokens": tokens,
        "cached_tokens": ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens"),
        "usage_in_stream": usage is not None,
    }


ADMIN_KEY = "bench-admin-key-0001"


@asynccontextmanager
async def direct(cfg: EngineConfig) -> AsyncIterator[tuple[str, str]]:
    """(chat base URL, engine root URL) of one replica the supervisor runs in this process."""
    async with EngineSupervisor(cfg, output_level=5) as engine:
        root = engine.replicas[0].base_url.removesuffix("/v1")
        yield root, root


@asynccontextmanager
async def via_gateway(cfg: EngineConfig) -> AsyncIterator[tuple[str, str]]:
    """(gateway root URL, engine root URL): `gwctl serve` with this one engine, from a temp config."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "auth": {"admin_key": ADMIN_KEY},
        "timeouts": {"first_byte": 300, "between_chunks": 300, "total": 600},
        "engines": [cfg.model_dump(mode="json", exclude_defaults=True)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.json"  # JSON is YAML
        path.write_text(json.dumps(config))
        repo = Path(__file__).resolve().parents[1]
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli.gwctl", "serve", "-c", str(path)], cwd=repo)
        root = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=root, timeout=5) as client:
                for _ in range(600):
                    if proc.poll() is not None:
                        raise RuntimeError(f"gwctl serve exited with {proc.returncode}")
                    try:
                        if (await client.get("/readyz")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(0.1)
                engines = await client.get("/admin/api/engines", headers={"authorization": f"Bearer {ADMIN_KEY}"})
                engine_root = engines.json()["data"][0]["replicas"][0]["base_url"].removesuffix("/v1")
            yield root, engine_root
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


async def measure(
    prefix_cache: bool, runs: int, prompt_tokens: int, n_ctx: int, threads: int | None, gateway: bool = False
) -> dict[str, list[float]]:
    cfg = EngineConfig(prefix_cache=prefix_cache, n_ctx=n_ctx, n_threads=threads)
    results: dict[str, list[float]] = {"cold": [], "warm-last": [], "warm-evicted": [], "decode": []}
    cached: dict[str, list[int | None]] = {"cold": [], "warm-last": [], "warm-evicted": []}
    async with (via_gateway if gateway else direct)(cfg) as (chat_root, engine_root):
        async with (
            httpx.AsyncClient(base_url=chat_root, timeout=300) as client,
            httpx.AsyncClient(base_url=engine_root, timeout=300) as engine,
        ):
            words = prompt_tokens  # calibrate: these words are about one token each
            words = int(words * prompt_tokens / await count_tokens(engine, document(0, words)))
            print(f"  prompt: {await count_tokens(engine, document(0, words) + ' Question 1: summarise.')} tokens")
            await stream_chat(client, "warm up", 4)
            for run in range(runs):
                shared = document(1000 + run, words)
                cold = await stream_chat(client, f"{shared}\nQuestion 1: summarise.", 8)
                warm = await stream_chat(client, f"{shared}\nQuestion 2: list the rivers.", 8)
                # Every slot gets an unrelated prompt (a short one is enough: a slot keeps only the
                # prefix it shares with its latest prompt), so the shared prefix survives only in RAM.
                for slot in range(cfg.parallel):
                    await stream_chat(client, f"{document(3000 + 10 * run + slot, 60)}\nQuestion 1: summarise.", 8)
                evicted = await stream_chat(client, f"{shared}\nQuestion 3: count the words.", 8)
                decode = await stream_chat(client, "Write a long story about a dragon and a river.", 200)
                results["cold"].append(cold["ttft_s"])
                results["warm-last"].append(warm["ttft_s"])
                results["warm-evicted"].append(evicted["ttft_s"])
                results["decode"].append(decode["decode_tok_s"])
                for case, out in (("cold", cold), ("warm-last", warm), ("warm-evicted", evicted)):
                    cached[case].append(out["cached_tokens"])  # type: ignore[arg-type]
            print(f"  usage in stream with include_usage: {warm['usage_in_stream']}; cached_tokens: {warm['cached_tokens']}")
            non_stream = await client.post(
                "/v1/chat/completions",
                json={"model": cfg.served_model_name, "max_tokens": 2,
                      "messages": [{"role": "user", "content": f"{shared}\nQuestion 4: why?"}]},
            )
            print(f"  non-streamed usage after a cached prefix: {non_stream.json().get('usage')}")
    results.update({f"cached {case}": values for case, values in cached.items()})  # type: ignore[misc]
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None, help="engine threads (default: the supervisor's)")
    parser.add_argument("--via-gateway", action="store_true", help="through `gwctl serve`, not to the engine directly")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} (other work on the machine skews every figure)")
    print("through the gateway (gwctl serve)" if args.via_gateway else "directly to the engine")
    for prefix_cache in (True, False):
        print(f"prefix_cache={prefix_cache} (llama-server {'--cache-prompt --cache-ram' if prefix_cache else '--no-cache-prompt'}):")
        results = await measure(prefix_cache, args.runs, args.prompt_tokens, args.n_ctx, args.threads, args.via_gateway)
        for case in ("cold", "warm-last", "warm-evicted"):
            values = results[case]
            print(
                f"  TTFT {case:<13} median {statistics.median(values):6.3f}s  runs {[round(v, 3) for v in values]}"
                f"  cached_tokens {results[f'cached {case}']}"
            )
        decode = results["decode"]
        print(f"  decode         median {statistics.median(decode):6.1f} tok/s  runs {[round(v, 1) for v in decode]}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
