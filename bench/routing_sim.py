"""Seeded multi-turn agent workload against simulated replicas: cache-aware routing vs baselines.

Workload (research/kv_affinity.md, section 4): G shared system prompts (2-8k tokens, Zipf alpha 1);
sessions arrive as a Poisson process; each has T turns (mean 10); each turn adds a user/tool
message (lognormal, 300-2000 tokens) and the previous answer (200-500 tokens); think time
exponential (mean 2-10 s). The no-sharing control puts a unique timestamp at the start of every
request's system prompt, so nothing can be reused.

Replicas: FIFO prefill at `--prefill-tps`, an LRU prefix cache of whole blocks (capacity: the
distinct system-prompt tokens divided by the target cache pressure), decode at a fixed time per output token alongside prefill. Each replica
reports the cached tokens of each request (like a cloud provider or vLLM with prompt token details),
unless `--no-reports` (like llama.cpp).

Policies: round_robin, least_loaded and session_sticky (the gateway's baseline policies), ours (the
gateway's `score` policy with its real features, filters, affinity index and latency model, fed
the simulated outcomes through the same feedback calls as in production, on a simulated clock)
and an oracle that sees the replicas' true caches and queues and picks the replica with the least
prefill work ahead of the first token (queued work plus the uncached part of this prompt).

Metrics: token-weighted hit rate (sum of cached / sum of prompt tokens), TTFT p50/p90/p99, load
balance (coefficient of variation of the prefill work per replica).

usage: python bench/routing_sim.py [--scenario pressure3|fit|control|all] [--sessions N] [--policies a,b] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.catalog import (
    Catalog,
    endpoints_from_settings,
)
from gateway.config import load_config
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.features import blocks_of
from gateway.routing.router import Router
from gateway.routing.settings import BreakerConfig, RoutingConfig
from gateway.routing.shared import SharedState
from gateway.state_store.memory import MemoryStore
from kernel.values import Usage

BLOCKS = blocks_of(RoutingConfig().affinity)  # the replicas cache whole blocks of the gateway's geometry
BYTES_PER_TOKEN = 4  # the simulator's token accounting: 4 ASCII bytes a token
POLICIES = ("round_robin", "least_loaded", "session_sticky", "ours", "oracle")


# -- workload ---------------------------------------------------------------------------------


class Corpus:
    """Random words, sliced: each slice is distinct text of a given token length."""

    WORDS = ("alpha", "beta", "gamma", "delta", "omega", "build", "test", "deploy", "cache", "route", "token", "prefix", "agent", "tool", "read", "write", "file", "diff", "patch")

    def __init__(self, seed: int, size: int = 4_000_000) -> None:
        rng = random.Random(seed)
        self.text = " ".join(rng.choices(self.WORDS, k=size // 6))
        self.rng = random.Random(seed + 1)

    def take(self, tokens: int) -> str:
        n = tokens * BYTES_PER_TOKEN
        start = self.rng.randrange(0, len(self.text) - n - 1)
        return self.text[start : start + n]


@dataclass
class Turn:
    user_tokens: int
    output_tokens: int
    think_s: float


@dataclass
class Session:
    id: int
    start: float
    system: int  # which shared system prompt
    turns: list[Turn]
    history: list[dict[str, str]] = field(default_factory=list)
    done: int = 0


def workload(seed: int, sessions: int, rate: float, groups: int, control: bool) -> tuple[list[Session], list[str], Corpus]:
    rng = random.Random(seed)
    corpus = Corpus(seed)
    systems = [corpus.take(rng.randint(2000, 8000)) for _ in range(groups)]
    weights = [1.0 / (i + 1) for i in range(groups)]  # Zipf, alpha 1
    out, t = [], 0.0
    for sid in range(sessions):
        t += rng.expovariate(rate)
        n_turns = max(2, min(30, int(rng.gauss(10, 3))))
        think = rng.uniform(2.0, 10.0)
        turns = [
            Turn(
                user_tokens=int(min(2000, max(300, rng.lognormvariate(math.log(700), 0.6)))),
                output_tokens=rng.randint(200, 500),
                think_s=rng.expovariate(1.0 / think),
            )
            for _ in range(n_turns)
        ]
        out.append(Session(sid, t, rng.choices(range(groups), weights)[0], turns))
    return out, systems, corpus


# -- replicas ---------------------------------------------------------------------------------


@dataclass
class Request:
    session: Session
    turn: int
    body: dict[str, Any]
    chain: list[int]
    prompt_tokens: int
    output_tokens: int
    arrival: float
    replica: int = -1
    hit_tokens: int = 0
    ttft: float = 0.0
    queued_tokens: int = 0
    ctx: Any = None


class Replica:
    def __init__(self, index: int, capacity_tokens: int, prefill_tps: float, tpot: float) -> None:
        self.index = index
        self.cache: OrderedDict[int, int] = OrderedDict()  # block -> tokens
        self.capacity = capacity_tokens
        self.tokens = 0
        self.prefill_tps = prefill_tps
        self.tpot = tpot
        self.queue: deque[Request] = deque()
        self.busy = False
        self.inflight = 0
        self.pending_tokens = 0
        self.work_tokens = 0

    def hit_blocks(self, chain: list[int]) -> int:
        n = 0
        for block in chain:
            if block not in self.cache:
                break
            n += 1
        return n

    def hit_tokens(self, chain: list[int], prompt_tokens: int) -> int:
        return min(prompt_tokens, BLOCKS.end(self.hit_blocks(chain)) // BYTES_PER_TOKEN)

    def store(self, chain: list[int]) -> None:
        for position in range(len(chain) - 1, -1, -1):  # tail first: heads are evicted last
            block = chain[position]
            if block in self.cache:
                self.cache.move_to_end(block)
            else:
                self.cache[block] = BLOCKS.tokens(position)
                self.tokens += self.cache[block]
        while self.tokens > self.capacity and self.cache:
            self.tokens -= self.cache.popitem(last=False)[1]


# -- the simulation ---------------------------------------------------------------------------


class Sim:
    def __init__(self, args: argparse.Namespace, policy: str, control: bool, capacity_tokens: int) -> None:
        self.args = args
        self.policy = policy
        self.control = control
        self.sessions, self.systems, self.corpus = workload(args.seed, args.sessions, args.rate, args.groups, control)
        self.replicas = [Replica(i, capacity_tokens, args.prefill_tps, args.tpot) for i in range(args.replicas)]
        self.now = 0.0
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = itertools.count()
        self.done: list[Request] = []
        self.rr = 0
        self.router, self.shared = self._router(capacity_tokens)
        self.endpoints = self.router.catalog.candidates("sim")
        self.next_refresh = 0.0
        self.decision_s = 0.0

    def _router(self, capacity_tokens: int) -> tuple[Router, SharedState]:
        settings = load_config(
            environ={},
            routing={"policy": "score" if self.policy in ("ours", "oracle") else self.policy},
            providers=[{"name": "sim", "kind": "vllm", "base_url": "http://sim.invalid/v1"}],
            deployments=[
                {
                    "model": "sim",
                    "provider": "sim",
                    "id": f"r{i}",
                    "context_window": 1_000_000,
                    "routing": {
                        "slots": 64,
                        "cache": {"capacity_tokens": capacity_tokens, "reports": not self.args.no_reports},
                    },
                }
                for i in range(self.args.replicas)
            ],
        )
        catalog = Catalog(endpoints_from_settings(settings), created=0)
        def clock() -> float:
            return self.now

        shared = SharedState(settings.routing, settings.state_store, catalog, MemoryStore(clock), CircuitBreaker(BreakerConfig()), clock=clock, replica_id="sim")
        return Router(settings.routing, catalog, shared, clock=clock, rng=random.Random(self.args.seed)), shared

    def push(self, at: float, kind: str, item: Any) -> None:
        heapq.heappush(self.events, (at, next(self.seq), kind, item))

    def run(self) -> dict[str, Any]:
        for s in self.sessions:
            self.push(s.start, "turn", s)
        while self.events:
            self.now, _, kind, item = heapq.heappop(self.events)
            if self.now >= self.next_refresh:  # the sync loop's cadence
                self.shared.latency.refresh()
                self.next_refresh = self.now + 0.25
            getattr(self, f"on_{kind}")(item)
        return self.metrics()

    # -- events -------------------------------------------------------------------------

    def on_turn(self, s: Session) -> None:
        turn = s.turns[s.done]
        if not s.history:
            system = self.systems[s.system]
            if self.control:
                system = f"[request at {self.now:.6f} s, session {s.id}] " + system
            s.history.append({"role": "system", "content": system})
        elif self.control:
            s.history[0] = {"role": "system", "content": f"[request at {self.now:.6f} s] " + self.systems[s.system]}
        s.history.append({"role": "user", "content": self.corpus.take(turn.user_tokens)})
        body = {"model": "sim", "messages": list(s.history), "max_tokens": 512}
        f = self.router.features("chat", body, None)
        req = Request(s, s.done, body, f.chain, f.canonical_bytes // BYTES_PER_TOKEN, turn.output_tokens, self.now)
        started = time.perf_counter()
        replica = self.choose(req, f)
        self.decision_s += time.perf_counter() - started
        req.replica = replica.index
        replica.inflight += 1
        replica.queue.append(req)
        req.queued_tokens = req.prompt_tokens - replica.hit_tokens(req.chain, req.prompt_tokens)
        replica.pending_tokens += req.queued_tokens
        self.serve(replica)

    def choose(self, req: Request, f: Any) -> Replica:
        if self.policy == "oracle":
            # Exact knowledge of every cache and queue: the least prefill work ahead of the first token.
            def work(r: Replica) -> float:
                return r.pending_tokens + req.prompt_tokens - r.hit_tokens(req.chain, req.prompt_tokens)

            return min(self.replicas, key=work)
        ctx = SimpleNamespace(op="chat", body=req.body, key_name=None, stream=True, usage=None, status=200, route=None, route_header=None, body_extra=None)
        decision = self.router.decide(self.endpoints, f)
        self.shared.next_sequence("sim")
        from gateway.routing.router import RouteTicket

        ticket = RouteTicket(f, decision, f.key_policy, 0)
        for sc in decision.ranked:
            ticket.predicted[sc.endpoint.id] = (sc.match_blocks, sc.hit_tokens)
        ctx.route = ticket
        endpoint = decision.ranked[0].endpoint
        self.router.attempt_started(ctx, endpoint, self.now)
        req.ctx = ctx
        return self.replicas[int(endpoint.id[1:])]

    def serve(self, replica: Replica) -> None:
        if replica.busy or not replica.queue:
            return
        req = replica.queue.popleft()
        req.hit_tokens = replica.hit_tokens(req.chain, req.prompt_tokens)
        uncached = req.prompt_tokens - req.hit_tokens
        replica.busy = True
        replica.work_tokens += uncached
        self.push(self.now + self.args.overhead_s + uncached / replica.prefill_tps, "prefilled", req)

    def on_prefilled(self, req: Request) -> None:
        replica = self.replicas[req.replica]
        replica.busy = False
        replica.pending_tokens -= req.queued_tokens
        replica.store(req.chain)
        req.ttft = self.now - req.arrival
        if req.ctx is not None:
            self.router.attempt_committed(req.ctx, self.endpoints[req.replica], self.now)
        self.push(self.now + req.output_tokens * replica.tpot, "finished", req)
        self.serve(replica)

    def on_finished(self, req: Request) -> None:
        replica = self.replicas[req.replica]
        replica.inflight -= 1
        if req.ctx is not None:
            req.ctx.usage = Usage(req.prompt_tokens, req.output_tokens, req.hit_tokens, cache_reported=not self.args.no_reports)
            self.router.finished(req.ctx)
        self.done.append(req)
        s = req.session
        s.history.append({"role": "assistant", "content": self.corpus.take(req.output_tokens)})
        s.done += 1
        if s.done < len(s.turns):
            self.push(self.now + s.turns[s.done - 1].think_s, "turn", s)

    # -- results ------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        ttfts = sorted(r.ttft for r in self.done)
        prompt = sum(r.prompt_tokens for r in self.done)
        cached = sum(r.hit_tokens for r in self.done)
        work = [r.work_tokens for r in self.replicas]
        mean_work = statistics.mean(work)
        return {
            "requests": len(self.done),
            "hit_rate": cached / prompt,
            "ttft_p50": ttfts[len(ttfts) // 2],
            "ttft_p90": ttfts[int(0.9 * len(ttfts))],
            "ttft_p99": ttfts[int(0.99 * len(ttfts))],
            "load_cv": statistics.pstdev(work) / mean_work if mean_work else 0.0,
            "mean_prompt_tokens": prompt / len(self.done),
            "decision_ms": 1000 * self.decision_s / len(self.done),
        }


def shared_prefix_tokens(args: argparse.Namespace) -> float:
    """Distinct system-prompt tokens the sessions use. Cache pressure is this over ONE replica's
    cache (as in research/kv_affinity.md's toy run): at 3x, a policy that sends every prefix to
    every replica must thrash, while one that partitions prefixes across replicas need not."""
    sessions, systems, _ = workload(args.seed, args.sessions, args.rate, args.groups, False)
    return sum(len(systems[g]) / BYTES_PER_TOKEN for g in {s.system for s in sessions})


def run_scenario(args: argparse.Namespace, name: str) -> dict[str, Any]:
    control = name == "control"
    pressure = {"fit": 0.5, "pressure3": 3.0, "control": 3.0}[name]
    capacity = int(shared_prefix_tokens(args) / pressure)
    results: dict[str, Any] = {"pressure": pressure, "capacity_tokens_per_replica": capacity}
    for policy in args.policies:
        if control and policy == "oracle":
            continue
        started = time.perf_counter()
        results[policy] = Sim(args, policy, control, capacity).run()
        results[policy]["wall_s"] = time.perf_counter() - started
    return results


def verdicts(name: str, r: dict[str, Any]) -> list[str]:
    out = []
    if name == "pressure3" and {"ours", "oracle"} <= r.keys():
        share = r["ours"]["hit_rate"] / r["oracle"]["hit_rate"]
        out.append(f"hit rate {share:.0%} of the oracle (target >= 90%): {'PASS' if share >= 0.9 else 'FAIL'}")
    if name == "pressure3" and {"ours", "round_robin"} <= r.keys():
        speedup = r["round_robin"]["ttft_p90"] / r["ours"]["ttft_p90"]
        out.append(f"TTFT p90 {speedup:.1f}x better than round-robin (target >= 5x): {'PASS' if speedup >= 5 else 'FAIL'}")
    if name == "control" and {"ours", "least_loaded"} <= r.keys():
        worse = r["ours"]["ttft_p90"] / r["least_loaded"]["ttft_p90"] - 1
        out.append(f"no-sharing control: TTFT p90 {worse:+.1%} vs least-loaded (target <= +2%): {'PASS' if worse <= 0.02 else 'FAIL'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="all", choices=["all", "fit", "pressure3", "control"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--rate", type=float, default=0.5, help="new sessions per second")
    parser.add_argument("--groups", type=int, default=64, help="distinct system prompts")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--prefill-tps", type=float, default=8000.0)
    parser.add_argument("--tpot", type=float, default=0.02, help="seconds per output token")
    parser.add_argument("--overhead-s", type=float, default=0.02, help="fixed time per request before prefill")
    parser.add_argument("--no-reports", action="store_true", help="replicas report no cached tokens (llama.cpp)")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset to run (verdicts need their policies)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.policies = [p for p in POLICIES if p in args.policies.split(",")]
    names = ["fit", "pressure3", "control"] if args.scenario == "all" else [args.scenario]
    report = {name: run_scenario(args, name) for name in names}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.sessions} sessions at {args.rate}/s, {args.groups} system prompts, {args.replicas} replicas, "
        f"prefill {args.prefill_tps:.0f} tok/s, seed {args.seed}, cached-token reports {'off' if args.no_reports else 'on'}"
    )
    for name, r in report.items():
        print(f"\n== {name}: cache pressure {r['pressure']}x ({r['capacity_tokens_per_replica']} tokens per replica)")
        print(f"{'policy':<15} {'hit rate':>8} {'TTFT p50':>9} {'p90':>8} {'p99':>8} {'load CV':>8} {'prompt':>7} {'decide ms':>9}")
        for policy in POLICIES:
            if policy not in r:
                continue
            m = r[policy]
            print(
                f"{policy:<15} {m['hit_rate']:>8.1%} {m['ttft_p50']:>8.2f}s {m['ttft_p90']:>7.2f}s {m['ttft_p99']:>7.2f}s "
                f"{m['load_cv']:>8.2f} {m['mean_prompt_tokens']:>7.0f} {m['decision_ms']:>9.3f}"
            )
        for line in verdicts(name, r):
            print("  " + line)


if __name__ == "__main__":
    main()
