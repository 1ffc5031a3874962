"""The loop sentinel against honest engines: which cells loop, and the test's p, beside a loop fault.

Starts the drill's reference (llama-server, sent what the bundled `llamacpp` adapter sends: top-k
and min-p off) and endpoints of `bench/blind_drill.py`'s kinds, sends each the sentinels' loop plan
(`probes.sentinels.loops.loop_plan`, at the drill's sizes and at the defaults) and the reference
its share (`reference_plan`), and prints every cell's loops beside the reference's and the loop
test's p at the first round's alpha and the confirmatory one. The honest rows are the test's false
positives across engines; the fault rows its power.

usage: python bench/loop_null.py [--kinds 0,1,2,loops] [--seed S] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.blind_drill import FAULTY, HONEST, MODEL, Endpoint, Kind, serving  # noqa: E402
from probes.sentinels import loops  # noqa: E402
from probes.sentinels.settings import LoopSettings  # noqa: E402
from probes.settings import HealthSettings  # noqa: E402

SIZES = {"drill": {"repeats": 6, "samples": 10}, "default": {}}
REFERENCE_SAMPLING = {"top_p": 1.0, "top_k": 0, "min_p": 0.0}  # providers.llamacpp's _OPENAI_SAMPLING


async def looped(client: httpx.AsyncClient, url: str, plan: list[loops.LoopRequest], lp: LoopSettings,
                 extra: dict[str, Any], limit: asyncio.Semaphore) -> list[bool | None]:  # fmt: skip
    async def one(r: loops.LoopRequest) -> bool | None:
        async with limit:
            response = await client.post(f"{url}/chat/completions", json={"model": MODEL, **r.body, **extra})
        if response.status_code != 200:
            return None
        choice = response.json()["choices"][0]
        text = str((choice.get("message") or {}).get("content") or "")
        return loops.is_loop(text, choice.get("finish_reason"), threshold=lp.repetition, word_n=lp.ngram,
                             char_n=lp.char_ngram)  # fmt: skip

    return list(await asyncio.gather(*(one(r) for r in plan)))


async def measure(endpoints: list[Endpoint], ref_url: str) -> list[dict[str, Any]]:
    rows = []
    confirm_alpha = HealthSettings().confirm_alpha
    async with httpx.AsyncClient(timeout=600) as client:
        limit = asyncio.Semaphore(2)  # the sentinels' concurrency
        for size, overrides in SIZES.items():
            lp = LoopSettings(**overrides)
            plan = loops.loop_plan(lp.prompts, repeats=lp.repeats, sampled_prompts=lp.sampled_prompts,
                                   samples=lp.samples, temperature=lp.temperature, seed=lp.seed,
                                   max_tokens=lp.max_tokens, system=lp.system)  # fmt: skip
            ref_plan = loops.reference_plan(plan)
            ref_cells = loops.tally(ref_plan, await looped(client, ref_url, ref_plan, lp, REFERENCE_SAMPLING, limit))
            expected = {c.key: c for c in ref_cells}
            for e in endpoints:
                cells = loops.tally(plan, await looped(client, e.base_url, plan, lp, {}, limit))
                outcome = loops.loop_test(cells, expected, floor=lp.floor, answer_floor=lp.answer_floor,
                                          informative_below=lp.informative_below, alpha=lp.alpha)  # fmt: skip
                p = outcome.p_value if outcome.p_value is not None else 1.0
                row = {"sizes": size, "kind": e.kind.label, "honest": e.kind.fault_class is None, "p": p,
                       "fails": p <= lp.alpha, "fails_confirm": p <= min(lp.alpha, confirm_alpha),
                       "cells": {c.key: [c.loops, c.n] for c in cells},
                       "reference": {c.key: [c.loops, c.n] for c in ref_cells}}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="0,1,2,loops", help="HONEST indices and/or `loops` (the 20%% fault)")
    parser.add_argument("--seed", type=int, default=0, help="the faults' seed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    loop_fault = next(k for k in FAULTY if k.fault_class == "loops")
    kinds: list[Kind] = [loop_fault if k == "loops" else HONEST[int(k)] for k in args.kinds.split(",")]
    endpoints = [Endpoint(f"ep-{i + 1:02d}", kind) for i, kind in enumerate(kinds)]
    with tempfile.TemporaryDirectory(prefix="loop-null-") as tmp, serving(endpoints, args.seed, Path(tmp)) as ref:
        rows = asyncio.run(measure(endpoints, ref))
    print("| sizes | kind | p | fails (alpha) | fails (confirm alpha) |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['sizes']} | {r['kind']} | {r['p']:.2g} | {r['fails']} | {r['fails_confirm']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
