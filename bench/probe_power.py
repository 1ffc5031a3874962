"""Power and false-positive rates of the quality probes, measured on the testbed's real model.

Pools of answers are drawn once per endpoint and fault (the expensive part), then every figure is
estimated by resampling: each replicate draws a test's worth of answers from the pools (disjoint
draws when both sides come from one pool) and runs the probe's own statistic on them.

    .venv/bin/python bench/probe_power.py --quick          # small pools, a few minutes
    .venv/bin/python bench/probe_power.py                  # the issue's sample sizes
    .venv/bin/python bench/probe_power.py --json power.json

Endpoints: `ref` (the reference engine, its own process), `honest` (the same weights in another
process) and `target` (same process as `honest`), which serves each fault in turn. Replicates
drawn from a finite pool are not independent: the pool size is printed with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.client import ProbeUnavailable  # noqa: E402
from probes.distribution import PROMPTS, draw_pool  # noqa: E402
from probes.fidelity import sample_token  # noqa: E402
from probes.logprob_drift import sample_window  # noqa: E402
from probes.settings import DistributionSettings, DriftSettings, FidelitySettings  # noqa: E402
from probes.stats.drift import drift_test  # noqa: E402
from probes.stats.fidelity import fidelity_test  # noqa: E402
from probes.stats.mmd import mmd_test  # noqa: E402
from probes.testbed.harness import EndpointSpec, Testbed  # noqa: E402

SUBSTITUTE = {"substitute": "gemma3-270m"}
QUANTIZE = {"quantize": "Q2_K"}


@dataclass(frozen=True)
class Plan:
    drift_pool: int  # one-token T=0 answers per drift prompt and endpoint
    drift_window: int  # requests per prompt in one window (the probe's `requests`)
    mmd_prompts: int
    mmd_pool: int  # completions per prompt and endpoint
    mmd_per_prompt: int  # per prompt and side in one test (10 x 25 = 250)
    mmd_tokens: int
    fidelity_pool: int
    fidelity_samples: int
    noise: tuple[float, ...]
    shares: tuple[float, ...]
    replicates: int
    permutations: int


# A smoke run: the sample sizes are below the issue's, so its rows carry no targets' weight.
QUICK = Plan(
    drift_pool=20, drift_window=10, mmd_prompts=6, mmd_pool=6, mmd_per_prompt=3, mmd_tokens=16,
    fidelity_pool=200, fidelity_samples=100, noise=(0.2, 1.0), shares=(0.5, 1.0),
    replicates=100, permutations=300,
)
FULL = Plan(
    drift_pool=60, drift_window=10, mmd_prompts=25, mmd_pool=20, mmd_per_prompt=10, mmd_tokens=50,
    fidelity_pool=1000, fidelity_samples=200, noise=(0.03, 0.1, 0.3, 0.5, 1.0), shares=(0.1, 0.2, 0.5, 1.0),
    replicates=200, permutations=1000,
)


class HttpChat:
    """The one method the probes' samplers need, over plain HTTP, counting billed tokens."""

    def __init__(self, http: httpx.AsyncClient, base_url: str, model: str = "smollm2") -> None:
        self._http, self._url, self._model = http, base_url.rstrip("/") + "/chat/completions", model
        self.tokens = 0
        self.requests = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        response = await self._http.post(self._url, json={**body, "model": self._model})
        if response.status_code != 200:
            raise ProbeUnavailable(f"{response.status_code}: {response.text[:200]}", status=response.status_code)
        data: dict[str, Any] = response.json()
        usage = data.get("usage") or {}
        self.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        return data


@dataclass
class Pools:
    drift: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    mmd: dict[str, dict[str, Any]] = field(default_factory=dict)
    fidelity: dict[str, tuple[list[str], dict[str, float]]] = field(default_factory=dict)
    tokens_per_request: dict[str, float] = field(default_factory=dict)  # per probe kind


async def draw_pools(tb: Testbed, plan: Plan, *, log: Callable[[str], None]) -> Pools:
    pools = Pools()
    drift = DriftSettings()
    mmd = DistributionSettings(prompts=plan.mmd_prompts, samples_per_prompt=plan.mmd_pool, max_tokens=plan.mmd_tokens)
    prompts = PROMPTS[: plan.mmd_prompts]
    spent: dict[str, list[int]] = {"drift": [0, 0], "mmd": [0, 0], "fidelity": [0, 0]}

    async def collect(chat: HttpChat, label: str, *, kinds: Sequence[str], seed: int) -> None:
        start = time.monotonic()
        for kind in kinds:
            before = (chat.tokens, chat.requests)
            if kind == "drift":
                pools.drift[label], _ = await sample_window(chat, drift.prompts, plan.drift_pool, 20, lambda: None)  # type: ignore[arg-type]
            elif kind == "mmd":
                pools.mmd[label], _ = await draw_pool(chat, prompts, mmd, lambda: None, first_seed=seed)  # type: ignore[arg-type]
            else:
                pools.fidelity[label] = await fidelity_pool(chat, plan.fidelity_pool, seed)
            spent[kind][0] += chat.tokens - before[0]
            spent[kind][1] += chat.requests - before[1]
        log(f"  pool {label:<24} {', '.join(kinds):<22} {time.monotonic() - start:6.1f} s")

    async with httpx.AsyncClient(timeout=600.0) as http:
        ref = HttpChat(http, tb.base_url("ref"))
        honest = HttpChat(http, tb.base_url("honest"))
        target = HttpChat(http, tb.base_url("target"))

        async def reference_side() -> None:
            await collect(ref, "ref", kinds=("drift", "mmd"), seed=1_000_000)

        async def target_side() -> None:
            await collect(honest, "honest", kinds=("drift", "mmd", "fidelity"), seed=2_000_000)
            conditions: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
                ("substitute", SUBSTITUTE, ("drift", "mmd")),
                ("Q2_K", QUANTIZE, ("drift", "mmd")),
                ("temperature 0.7", {"temperature": 0.7}, ("fidelity",)),
            ]
            conditions += [(f"logit_noise {s:g}", {"logit_noise": s, "seed": 7}, ("drift",)) for s in plan.noise]
            conditions += [
                (f"partial Q2_K {f:g}", {"partial": {"share": f, "fault": QUANTIZE}, "seed": 7}, ("drift",))
                for f in plan.shares if f < 1
            ]
            conditions += [
                (f"partial substitute {f:g}", {"partial": {"share": f, "fault": SUBSTITUTE}, "seed": 7}, ("mmd",))
                for f in plan.shares if f < 1
            ]
            for i, (label, fault, kinds) in enumerate(conditions):
                await asyncio.to_thread(tb.set_fault, "target", fault)
                await collect(target, label, kinds=kinds, seed=3_000_000 + 100_000 * i)
            await asyncio.to_thread(tb.clear_fault, "target")

        await asyncio.gather(reference_side(), target_side())
    pools.tokens_per_request = {k: t / max(1, n) for k, (t, n) in spent.items()}
    return pools


async def fidelity_pool(chat: HttpChat, n: int, seed: int) -> tuple[list[str], dict[str, float]]:
    fidelity = FidelitySettings()
    tokens: list[str] = []
    top: dict[str, float] = {}
    for i in range(n):
        token, answer_top = await sample_token(
            chat, fidelity.prompt, temperature=fidelity.temperature, top_logprobs=20, seed=seed + i
        )
        if token is not None:
            tokens.append(token)
            top = top or answer_top
    return tokens, top


# -- resampling ----------------------------------------------------------------------------------


@dataclass
class Figure:
    probe: str
    case: str
    kind: str  # "power" or "FPR"
    rate: float
    replicates: int
    per_test: str  # sample size of one test
    tokens_per_test: int
    pool: str
    target: str = ""

    @property
    def se(self) -> float:
        return float(np.sqrt(max(self.rate * (1 - self.rate), 1e-12) / self.replicates))

    def verdict(self) -> str:
        if not self.target:
            return ""
        op, value = self.target.split()
        ok = self.rate >= float(value) if op == ">=" else self.rate <= float(value) + 2 * self.se
        return "PASS" if ok else "FAIL"


def _split(rng: np.random.Generator, size: int, counts: Sequence[int]) -> list[np.ndarray]:
    order = rng.permutation(size)
    out, at = [], 0
    for c in counts:
        out.append(order[at : at + c])
        at += c
    return out


def drift_rate(
    pools: Pools, test: str, golden: str, plan: Plan, rng: np.random.Generator, alpha: float
) -> float:
    hits = 0
    n = plan.drift_window
    for _ in range(plan.replicates):
        window, base = {}, {}
        for prompt, answers in pools.drift[test].items():
            if test == golden:
                a, b = _split(rng, len(answers), (n, n))
                window[prompt], base[prompt] = [answers[i] for i in a], [answers[i] for i in b]
            else:
                window[prompt] = [answers[i] for i in _split(rng, len(answers), (n,))[0]]
                ref = pools.drift[golden][prompt]
                base[prompt] = [ref[i] for i in _split(rng, len(ref), (n,))[0]]
        p = drift_test(window, base, permutations=plan.permutations, rng=rng).p_value
        hits += p is not None and p <= alpha
    return hits / plan.replicates


def mmd_rate(
    pools: Pools, test: str, ref: str, plan: Plan, rng: np.random.Generator, alpha: float, *, max_chars: int = 1000
) -> float:
    hits = 0
    k = plan.mmd_per_prompt
    for _ in range(plan.replicates):
        sides: list[tuple[list[str], list[int]]] = [([], []), ([], [])]
        for side, label in enumerate((test, ref)):
            pool = pools.mmd[label]
            by_prompt: dict[int, list[str]] = {}
            for text, i in zip(pool["texts"], pool["prompts"], strict=True):
                by_prompt.setdefault(i, []).append(text)
            for i, texts in sorted(by_prompt.items()):
                for j in _split(rng, len(texts), (min(k, len(texts)),))[0]:
                    sides[side][0].append(texts[j])
                    sides[side][1].append(i)
        outcome = mmd_test(
            sides[0][0], sides[0][1], sides[1][0], sides[1][1], max_chars=max_chars, permutations=plan.permutations,
            rng=rng,
        )
        hits += outcome.p_value is not None and outcome.p_value <= alpha
    return hits / plan.replicates


def fidelity_rate(pools: Pools, label: str, plan: Plan, rng: np.random.Generator, alpha: float) -> float:
    tokens, top = pools.fidelity[label]
    hits = 0
    for _ in range(plan.replicates):
        picked = _split(rng, len(tokens), (min(plan.fidelity_samples, len(tokens)),))[0]
        counts: dict[str, int] = {}
        for i in picked:
            counts[tokens[i]] = counts.get(tokens[i], 0) + 1
        p = fidelity_test(counts, top, 1.0).p_value
        hits += p is not None and p <= alpha
    return hits / plan.replicates


def figures(pools: Pools, plan: Plan, rng: np.random.Generator, *, power_targets: bool = True) -> list[Figure]:
    """Every figure; `power_targets=False` leaves the power targets off (they assume the full sizes)."""
    drift_a, mmd_a, fid_a = DriftSettings().alpha, DistributionSettings().alpha, FidelitySettings().alpha
    n_prompts = len(DriftSettings().prompts)
    tpr = pools.tokens_per_request
    drift_size = f"{plan.drift_window}x{n_prompts} req"
    drift_tokens = round(tpr["drift"] * plan.drift_window * n_prompts)
    mmd_size = f"{plan.mmd_per_prompt}x{plan.mmd_prompts}={plan.mmd_per_prompt * plan.mmd_prompts}/side"
    mmd_tokens = round(tpr["mmd"] * plan.mmd_per_prompt * plan.mmd_prompts)
    fid_tokens = round(tpr["fidelity"] * plan.fidelity_samples)
    dpool, mpool, fpool = f"{plan.drift_pool}/prompt", f"{plan.mmd_pool}/prompt", str(plan.fidelity_pool)
    out = [
        Figure("logprob_drift", "honest vs its golden", "FPR", drift_rate(pools, "honest", "honest", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool, f"<= {drift_a}"),
        Figure("logprob_drift", "honest replica vs reference", "FPR", drift_rate(pools, "honest", "ref", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool, f"<= {drift_a}"),
        Figure("logprob_drift", "Q2_K vs golden", "power", drift_rate(pools, "Q2_K", "honest", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool, ">= 0.9"),
        Figure("logprob_drift", "substitute vs reference", "power", drift_rate(pools, "substitute", "ref", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool),
    ]
    out += [
        Figure("logprob_drift", f"logit_noise {s:g} vs golden", "power",
               drift_rate(pools, f"logit_noise {s:g}", "honest", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool)
        for s in plan.noise
    ]
    out += [
        Figure("logprob_drift", f"partial Q2_K {f:g} vs golden", "power",
               drift_rate(pools, "Q2_K" if f == 1 else f"partial Q2_K {f:g}", "honest", plan, rng, drift_a),
               plan.replicates, drift_size, drift_tokens, dpool)
        for f in plan.shares
    ]
    out += [
        Figure("distribution", "honest replica vs reference", "FPR", mmd_rate(pools, "honest", "ref", plan, rng, mmd_a),
               plan.replicates, mmd_size, mmd_tokens, mpool, f"<= {mmd_a}"),
        Figure("distribution", "substitute vs reference", "power", mmd_rate(pools, "substitute", "ref", plan, rng, mmd_a),
               plan.replicates, mmd_size, mmd_tokens, mpool, ">= 0.99"),
        Figure("distribution", "substitute, first 30 chars", "power",
               mmd_rate(pools, "substitute", "ref", plan, rng, mmd_a, max_chars=30),
               plan.replicates, mmd_size, mmd_tokens, mpool),
        Figure("distribution", "Q2_K vs reference", "power", mmd_rate(pools, "Q2_K", "ref", plan, rng, mmd_a),
               plan.replicates, mmd_size, mmd_tokens, mpool),
        Figure("distribution", "Q2_K, first 30 chars", "power",
               mmd_rate(pools, "Q2_K", "ref", plan, rng, mmd_a, max_chars=30),
               plan.replicates, mmd_size, mmd_tokens, mpool),
    ]
    out += [
        Figure("distribution", f"partial substitute {f:g}", "power",
               mmd_rate(pools, "substitute" if f == 1 else f"partial substitute {f:g}", "ref", plan, rng, mmd_a),
               plan.replicates, mmd_size, mmd_tokens, mpool)
        for f in plan.shares
    ]
    out += [
        Figure("fidelity", "honest T=1", "FPR", fidelity_rate(pools, "honest", plan, rng, fid_a),
               plan.replicates, f"{plan.fidelity_samples} samples", fid_tokens, fpool, f"<= {fid_a}"),
        Figure("fidelity", "served T=0.7 (asked 1.0)", "power", fidelity_rate(pools, "temperature 0.7", plan, rng, fid_a),
               plan.replicates, f"{plan.fidelity_samples} samples", fid_tokens, fpool, ">= 0.95"),
    ]
    if not power_targets:
        for f in out:
            if f.kind == "power":
                f.target = ""
    return out


def render(rows: Sequence[Figure]) -> str:
    head = f"{'probe':<14} {'case':<30} {'':<5} {'rate':>6} {'±se':>6} {'per test':<17} {'tokens/test':>11} {'pool':<11} target"
    lines = [head, "-" * len(head)]
    for f in rows:
        lines.append(
            f"{f.probe:<14} {f.case:<30} {f.kind:<5} {f.rate:6.3f} {f.se:6.3f} {f.per_test:<17} {f.tokens_per_test:>11} "
            f"{f.pool:<11} {f.target} {f.verdict()}".rstrip()
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small pools and fewer replicates")
    parser.add_argument("--replicates", type=int, help="resampled tests per figure")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resampling and permutations")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per testbed process")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.replicates:
        plan = Plan(**{**asdict(plan), "replicates": args.replicates})

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    start = time.monotonic()
    log(f"probe_power: {'quick' if args.quick else 'full'} plan {plan}")
    specs = [EndpointSpec("ref", process=0), EndpointSpec("honest", process=1), EndpointSpec("target", process=1)]
    with Testbed(specs, threads=args.threads) as tb:
        pools = asyncio.run(draw_pools(tb, plan, log=log))
    drawn = time.monotonic() - start
    rows = figures(pools, plan, np.random.default_rng(args.seed), power_targets=not args.quick)
    print(render(rows))
    print(f"\npools drawn in {drawn:.0f} s, resampled in {time.monotonic() - start - drawn:.0f} s; "
          f"tokens per request: " + ", ".join(f"{k} {v:.1f}" for k, v in pools.tokens_per_request.items()))
    if args.json:
        args.json.write_text(json.dumps({"plan": asdict(plan), "figures": [asdict(f) for f in rows]}, indent=2))
    return 0 if all(f.verdict() != "FAIL" for f in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
