"""Power and false-positive rates of the sentinel checks, by Monte Carlo over their pure statistics.

- loops: the loop test (`probes.sentinels.loops.loop_test`: repeats, greedy answers, sampled answers)
  on the default plan (4 prompts x 25 T=0 requests + 2 prompts x 25 seeded samples = 150 responses)
  against a clean reference, for injected loop rates r and an honest stack that loops now and then
  (share b), each answer independently (a nondeterministic stack; engine-specific greedy loops, the
  `answer_floor`'s case, are not simulated);
- needle: `judge_retrieval` over the default grid (sizes halving to 128 plus 0.85 and 0.7 of the
  largest, depths 0.05/0.5/0.9) for a small model that retrieves each cell with probability
  `retrieval` on the reference and on the endpoint independently (nondeterminism across stacks),
  with and without a truncation (keep head or tail, cut at a quarter of the largest size or at
  half the window);
- usage: `check_linear` with per-prompt noise in the reported counts (a tokenizer that is not
  quite linear in ours), with and without a truncation at a quarter of the largest size.

usage: python bench/sentinel_power.py [--runs N] [--seed S] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.sentinels.loops import LoopCell, loop_test  # noqa: E402
from probes.sentinels.needle import NeedleCell, judge_retrieval, plan_sizes  # noqa: E402
from probes.sentinels.settings import SentinelSettings  # noqa: E402
from probes.sentinels.usage import UsagePoint, check_linear  # noqa: E402

S = SentinelSettings()
WINDOW = 8192
SLOPE, INTERCEPT = 1.15, 9.0


def loop_rate(runs: int, rng: np.random.Generator, honest: float, injected: float) -> float:
    """Share of runs where the loop test fires; the reference sees the honest share only."""
    lp = S.loops
    cells = [(f"p{i}@t0", lp.repeats, 1) for i in range(len(lp.prompts))]
    cells += [(f"p{i}@t{lp.temperature}", lp.samples, lp.samples) for i in range(lp.sampled_prompts)]
    p_loop = honest + (1 - honest) * injected
    fired = 0
    for _ in range(runs):
        observed = [LoopCell(k, int(rng.binomial(n, p_loop)), n) for k, n, _ in cells]
        expected = {k: LoopCell(k, int(rng.binomial(m, honest)), m) for k, _, m in cells}
        out = loop_test(
            observed, expected, floor=lp.floor, answer_floor=lp.answer_floor,
            informative_below=lp.informative_below, alpha=lp.alpha,
        )
        fired += out.details["finding"] == "loops"
    return fired / runs


def grid() -> list[int]:
    n = S.needle
    return plan_sizes(
        WINDOW, slope=SLOPE, intercept=INTERCEPT, max_tokens=n.max_tokens, margin_tokens=n.margin_tokens,
        margin_share=n.margin_share, min_size=n.min_size, shrink=n.shrink, cap=n.max_prompt_tokens,
        upper_shares=n.upper_shares,
    )


def survives(size: int, depth: float, cut: int | None, keep: str) -> bool:
    """Whether the needle and the question both reach the model under a cut at `cut` tokens."""
    if cut is None or size <= cut:
        return True
    return depth * size >= size - cut if keep == "tail" else False  # keeping the head drops the question


def needle_rate(runs: int, rng: np.random.Generator, retrieval: float, cut: int | None, keep: str) -> dict[str, float]:
    sizes = grid()
    counts = {"truncation": 0, "degraded": 0}
    for _ in range(runs):
        cells = []
        for size in sizes:
            for depth in S.needle.depths:
                expected = bool(rng.random() < retrieval)
                found = survives(size, depth, cut, keep) and bool(rng.random() < retrieval)
                cells.append(NeedleCell(size, depth, found, expected))
        finding = judge_retrieval(cells, min_lost=S.needle.min_lost).details["finding"]
        if finding in counts:
            counts[finding] += 1
    return {k: v / runs for k, v in counts.items()}


def usage_rate(runs: int, rng: np.random.Generator, noise: float, cut: int | None) -> float:
    u = S.usage
    long_sizes = grid()
    fired = 0
    for _ in range(runs):
        def reported(local: int) -> int:
            r = INTERCEPT + SLOPE * local + rng.normal(0, noise)
            return int(round(min(r, cut) if cut is not None else r))

        fit = [UsagePoint(f"fit:{x}", x + 20, reported(x + 20)) for x in u.fit_sizes]
        long = [UsagePoint(f"long:{x}", x + 30, reported(x + 30)) for x in long_sizes for _ in S.needle.depths]
        out = check_linear(fit, long, rel_tolerance=u.rel_tolerance, abs_tolerance=u.abs_tolerance, min_slope=u.min_slope)
        fired += out.details["finding"] != "linear"
    return fired / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cut = int(grid()[-1] * SLOPE / 4)
    half = int(WINDOW / 2 / SLOPE)  # in local tokens, as the sizes: half the window reported
    figures: dict[str, dict[str, float]] = {"loops": {}, "needle": {}, "usage": {}}
    for honest in (0.0, 0.002, 0.005):
        for injected in (0.0, 0.01, 0.02, 0.05, 0.1):
            figures["loops"][f"honest={honest} injected={injected}"] = loop_rate(args.runs, rng, honest, injected)
    for retrieval in (1.0, 0.9, 0.7):
        for keep in ("head", "tail"):
            for c in (None, cut, half):
                if c is None and keep == "tail":
                    continue
                label = f"retrieval={retrieval} " + (f"cut={c} keep={keep}" if c else "honest")
                figures["needle"][label] = needle_rate(args.runs, rng, retrieval, c, keep)["truncation"]
    for noise in (0.0, 1.0, 3.0, 10.0):
        for c in (None, cut):
            figures["usage"][f"noise={noise} " + (f"cut={c}" if c else "honest")] = usage_rate(args.runs, rng, noise, c)
    if args.json:
        print(json.dumps({"runs": args.runs, "seed": args.seed, "sizes": grid(), "figures": figures}, indent=1))
        return
    print(f"runs={args.runs} seed={args.seed} window={WINDOW} needle sizes={grid()}")
    for check, rows in figures.items():
        print(f"\n{check}: share of runs flagged (false positives where nothing is injected)")
        for label, value in rows.items():
            print(f"  {label:<42} {value:.3f}")


if __name__ == "__main__":
    main()
