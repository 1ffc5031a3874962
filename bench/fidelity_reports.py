"""Fidelity on an honest llama-cpp-python endpoint whose reported logprobs depend on its KV cache.

The testbed's `Llama` keeps the KV cache of the prompt prefix it shares with the previous request,
and the first token's reported logprobs then differ slightly from a fresh evaluation of the same
prompt (measured 0.17 nats on one token). A fidelity round sends one conversation `--samples`
times, so its first request follows another conversation and every later one follows itself: the
first answer's logprobs are the odd ones. The probe built its null from the first answer alone
and failed this honest endpoint in 2 of 6 rounds of the blind drill. Each round here samples as the
probe does (a conversation from the user-like pool, one-token samples at T = 1, seeded) and prints
the test both ways on the same samples: against the mixture of every answer's logprobs (the probe
now) and against the first answer's alone (before), with how many distinct reports there were and
how far apart.

    nice -n 10 .venv/bin/python bench/fidelity_reports.py --rounds 12     # ~4 min here
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.fidelity import logprob_spread  # noqa: E402
from probes.logprob_drift import first_token  # noqa: E402
from probes.settings import FidelitySettings, TrafficSettings  # noqa: E402
from probes.stats.fidelity import fidelity_test  # noqa: E402
from probes.testbed.harness import EndpointSpec, Testbed  # noqa: E402
from probes.traffic import conversation  # noqa: E402


async def one_round(url: str, rng: np.random.Generator, samples: int) -> dict[str, object]:
    frame = conversation(rng, TrafficSettings(), tools=False)
    counts: collections.Counter[str] = collections.Counter()
    tops: list[dict[str, float]] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for _ in range(samples):
            body = {**frame, "model": "smollm2", "max_tokens": 1, "temperature": 1.0, "top_p": 1, "logprobs": True,
                    "top_logprobs": 20, "seed": int(rng.integers(2**31))}  # fmt: skip
            token, top = first_token((await client.post("/chat/completions", json=body)).json())
            if token is not None and top:
                counts[token] += 1
                tops.append(top)
    settings = FidelitySettings()
    kwargs = {"min_p": settings.tolerated_min_p, "top_k": settings.tolerated_top_k}
    mixture = fidelity_test(counts, tops, 1.0, **kwargs)
    first = fidelity_test(counts, tops[0], 1.0, **kwargs)
    return {
        "mixture_p": mixture.p_value, "first_p": first.p_value, "reports": mixture.details.get("reports"),
        "spread": logprob_spread(tops), "first_odd": tops[0] != tops[-1], "cells": mixture.details.get("cells"),
    }


async def main(rounds: int, samples: int, seed: int) -> None:
    alpha = FidelitySettings().alpha
    with Testbed([EndpointSpec("honest", model="smollm2")], threads=1) as testbed:
        url = testbed.base_url("honest")
        rng = np.random.default_rng(seed)
        rows = []
        print(f"{'round':>5} {'reports':>7} {'spread':>7} {'first odd':>9} {'p mixture':>10} {'p first':>10}")
        for i in range(rounds):
            row = await one_round(url, rng, samples)
            rows.append(row)
            print(f"{i:>5} {row['reports']:>7} {row['spread']:>7.3f} {row['first_odd']!s:>9} "
                  f"{row['mixture_p'] or float('nan'):>10.3g} {row['first_p'] or float('nan'):>10.3g}")  # fmt: skip
            if row["mixture_p"] is not None and row["mixture_p"] <= alpha:
                print(f"      cells: {row['cells']}")
    for name in ("mixture_p", "first_p"):
        failed = sum(1 for r in rows if r[name] is not None and r[name] <= alpha)
        print(f"{name.split('_')[0]:>8}: {failed} of {len(rows)} honest rounds at p <= {alpha}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--samples", type=int, default=FidelitySettings().samples)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.samples, args.seed))
