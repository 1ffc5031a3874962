"""Routing decision cost: p50/p99 of one decision for 1k, 32k and 100k-token prompts, 16 endpoints.

What is timed is everything the route stage does on the CPU for a request without a key limit:
parse the `provider` preferences, build the request features (canonical JSON, estimate, chain
hashes), filter, score and rank the 16 candidates (affinity binary search, latency summaries,
guards, consistent-hash home), and write the explanation header. The prompt is never tokenized
(the exact count is only needed near a context window; the deployments here have 200k windows).
Separately timed: the feedback after the answer (affinity insert of the whole chain), which runs
once the response is done, off the decision path.

The index is warm: 400 other conversations are spread over the endpoints, and the measured
conversation's earlier turns sit on 3 of them (a partial hit), so the search does real work.

usage: python bench/routing_decision.py [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.catalog import Catalog
from gateway.config import Settings
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.explain import header
from gateway.routing.router import Router
from gateway.routing.settings import BreakerConfig
from gateway.routing.shared import SharedState
from gateway.routing.tokens import TokenCounter
from gateway.state_store.memory import MemoryStore
from tests.fakes.catalog import make_endpoint

WORDS = ["the", "router", "sends", "each", "request", "to", "the", "endpoint", "that", "holds", "its", "prefix", "cache", "while", "the", "load", "stays", "balanced", "across", "replicas", "and", "the", "cost", "of", "cached", "input", "tokens", "is", "lower", "than", "uncached", "ones", "so", "agents", "that", "resend", "long", "histories", "benefit", "from", "affinity", "def", "return", "import", "class", "self", "value", "config", "error", "latency", "throughput", "window", "budget", "quality", "probe", "engine", "server", "stream", "token"]


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def conversation(rng: random.Random, tokens: int, counter: TokenCounter) -> list[dict[str, str]]:
    """A system prompt and alternating turns, about `tokens` cl100k tokens in all (counted once)."""
    messages = [{"role": "system", "content": text(rng, 300)}]
    while counter.count_chat(messages) < tokens:
        role = "user" if messages[-1]["role"] != "user" else "assistant"
        messages.append({"role": role, "content": text(rng, min(2000, max(50, (tokens - counter.count_chat(messages)) // 2)))})
    return messages


def endpoints() -> list:
    eps = []
    for i in range(4):  # local engine replicas
        eps.append(make_endpoint(f"local-{i}", "m", provider="local", price={"input": 0.0, "output": 0.0}))
    kinds = ["openai", "deepseek", "together", "fireworks"]
    for i in range(12):
        eps.append(make_endpoint(f"cloud{i}/m", "m", price={"input": 0.1 + 0.05 * i, "cached_input": 0.02, "output": 0.4}))
    # make_endpoint builds 'openai' kinds with no routing hints; give the local ones slots and windows.
    from dataclasses import replace

    from kernel.deployment import DeploymentRouting

    out = []
    for i, ep in enumerate(eps):
        routing = DeploymentRouting(slots=4) if i < 4 else DeploymentRouting()
        dep = ep.deployment.model_copy(update={"context_window": 200_000, "routing": routing})
        out.append(replace(ep, deployment=dep, kind="vllm" if i < 4 else kinds[i % 4]))
    return out


def build() -> tuple[Router, SharedState]:
    settings = Settings()
    catalog = Catalog(endpoints(), created=0)
    clock = time.perf_counter
    shared = SharedState(settings.routing, settings.state_store, catalog, MemoryStore(), CircuitBreaker(BreakerConfig()), clock=clock)
    router = Router(settings.routing, catalog, shared, clock=clock, rng=random.Random(1))
    return router, shared


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(size: int, runs: int, counter: TokenCounter, warm: bool) -> dict[str, float]:
    router, shared = build()
    rng = random.Random(size)
    candidates = router.catalog.candidates("m")
    # Warm index: other conversations spread over the endpoints, with their latency observed.
    for s in range(400):
        other = conversation(random.Random(10_000 + s), min(size, 4000), counter) if s < 40 else [
            {"role": "system", "content": text(random.Random(s), 200)},
            {"role": "user", "content": text(random.Random(s + 1), 400)},
        ]
        f = router.features("chat", {"model": "m", "messages": other}, None)
        shared.learn_affinity(candidates[s % 16].id, f.chain, 0, None)
    for ep in candidates:
        for u in (100, 2000, 20000):
            shared.latency.observe(ep.id, u, 0.05 + u / 5000, 40.0)
    shared.latency.refresh()
    messages = conversation(rng, size, counter)
    exact = counter.count_chat(messages)
    earlier = router.features("chat", {"model": "m", "messages": messages[:-2]}, None)
    for ep in candidates[4:7]:
        shared.learn_affinity(ep.id, earlier.chain, 0, None)
    body = {"model": "m", "messages": messages, "stream": True, "provider": {"data_collection": "allow"}}
    # Warm: the conversation's previous turn was routed already (agents resend their history), so
    # only the new turn's blocks are hashed. Cold: never seen (chain cache emptied before each).
    previous = {**body, "messages": messages[:-1]}
    decide, cpu, feats, feedback = [], [], [], []
    for i in range(runs + 20):
        if warm:
            router.features("chat", previous, "team")
        else:
            router.chains._entries.clear()
            router.chains._bytes = 0
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        f = router.features("chat", body, "team")
        t1 = time.perf_counter_ns()
        d = router.decide(candidates, f)
        header(d)
        t2 = time.perf_counter_ns()
        c2 = time.thread_time_ns()
        shared.learn_affinity(d.ranked[0].endpoint.id, f.chain, d.ranked[0].match_blocks, None)
        t3 = time.perf_counter_ns()
        if i >= 20:
            decide.append((t2 - t0) / 1e6)
            cpu.append((c2 - c0) / 1e6)
            feats.append((t1 - t0) / 1e6)
            feedback.append((t3 - t2) / 1e6)
    return {
        "tokens": exact,
        "estimate": f.est_prompt_tokens,
        "blocks": len(f.chain),
        "p50_ms": statistics.median(decide),
        "p99_ms": percentile(decide, 0.99),
        "cpu_p50_ms": statistics.median(cpu),
        "cpu_p99_ms": percentile(cpu, 0.99),
        "features_p50_ms": statistics.median(feats),
        "score_p50_ms": statistics.median(decide) - statistics.median(feats),
        "feedback_p50_ms": statistics.median(feedback),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counter = TokenCounter()
    results: dict[str, dict[int, dict[str, float]]] = {"cold": {}, "warm": {}}
    for mode, rows in results.items():
        for size, runs in ((1_000, 3000), (32_000, 600), (100_000, 300)):
            rows[size] = measure(size, runs, counter, warm=mode == "warm")
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for mode, rows in results.items():
        report(mode, rows)
    print("wall: time.perf_counter; CPU: this thread's CPU time (unaffected by other processes on the machine)")
    print("targets: p99 < 0.5 ms at 32k, < 2 ms at 100k")


def report(mode: str, results: dict[int, dict[str, float]]) -> None:
    what = "new conversation, every block hashed" if mode == "cold" else "next turn of a known conversation"
    print(f"\nrouting decision, 16 endpoints, {mode} ({what}); ms on one core, no I/O")
    print(f"{'prompt':>8} {'blocks':>7} {'estimate':>9} {'wall p50':>9} {'p99':>7} {'CPU p50':>8} {'p99':>7} {'features':>9} {'filter+score':>13} {'feedback':>9}")
    for r in results.values():
        print(
            f"{r['tokens']:>8} {r['blocks']:>7} {r['estimate']:>9} {r['p50_ms']:>9.3f} {r['p99_ms']:>7.3f} "
            f"{r['cpu_p50_ms']:>8.3f} {r['cpu_p99_ms']:>7.3f} "
            f"{r['features_p50_ms']:>9.3f} {r['score_p50_ms']:>13.3f} {r['feedback_p50_ms']:>9.3f}"
        )


if __name__ == "__main__":
    asyncio.run(asyncio.sleep(0))
    main()
