"""Power and false-positive rates of the tool-call probes, by Monte Carlo.

- active: the suite (`probes.toolcalls`, all cases, about 100 calls) judged against the reference's
  answers by the probe's own scoring (`scoring.outcome_of`, `figures`, `judge`). A pool of honest
  answers is drawn once: from an ideal fake model (default) or from the real SmolLM2-135M behind
  the testbed (`--testbed`: the reference `ref` and an honest replica `honest-2` in another
  process). Each replicate breaks a share r of the answers that carry calls with the testbed's own
  transform (`probes.testbed.faults.corrupt_tool_calls`, a kind drawn uniformly), as the
  `tool_corruption` fault does, and runs the judgement. The null rows break a share at the
  configured baseline rate (0.2%: an honest stack's occasional error) and none at all.
- passive: the Bernoulli CUSUM of the live-traffic monitor (p0 0.2%, p1 5%, h 5) on simulated
  streams of responses: the share of runs that alarm within 100 / 1,000 / 10,000 responses, and
  the median responses to the alarm.

usage: python bench/toolcall_power.py [--runs N] [--null-runs N] [--seed S] [--testbed] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.settings import ProbeSettings  # noqa: E402
from probes.stats.cusum import BernoulliCusum, run_lengths  # noqa: E402
from probes.testbed.faults import TOOL_CORRUPTION_KINDS, corrupt_tool_calls  # noqa: E402
from probes.toolcalls.cases import Case, load_suite  # noqa: E402
from probes.toolcalls.scoring import CaseOutcome, figures, judge, outcome_of, truth_of  # noqa: E402
from probes.toolcalls.validator import SchemaCache  # noqa: E402
from tests.probes.toolcalls.fakes import FakeToolClient, expectations_of  # noqa: E402

SETTINGS = ProbeSettings()
RATES = (0.01, 0.05, 0.2)


def corrupt(response: dict[str, Any], case: Case, rng: np.random.Generator) -> dict[str, Any]:
    message = response["choices"][0]["message"]
    kind = TOOL_CORRUPTION_KINDS[int(rng.integers(len(TOOL_CORRUPTION_KINDS)))]
    calls, content, finish = corrupt_tool_calls(message["tool_calls"], case.tools, kind, rng)
    broken: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        broken["tool_calls"] = calls
    return {**response, "choices": [{"index": 0, "message": broken, "finish_reason": finish}]}


def has_calls(response: Mapping[str, Any]) -> bool:
    return bool(response["choices"][0]["message"].get("tool_calls"))


def active_rate(
    pool: Sequence[tuple[Case, dict[str, Any]]],
    reference: Mapping[str, CaseOutcome],
    rate: float,
    runs: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Share of runs the probe fails at corruption `rate`, and the mean calls per run."""
    schemas = SchemaCache()
    clean = {case.id: outcome_of(case, resp, schemas) for case, resp in pool}
    expected = {case.id: case.expect_call for case, _ in pool}
    truth = truth_of(expected, reference)
    ref_fig = figures(reference.values(), expected)
    corruptible = [i for i, (_, resp) in enumerate(pool) if has_calls(resp)]
    fails = 0
    for _ in range(runs):
        outcomes = dict(clean)
        for i in corruptible:
            if rng.random() < rate:
                case, resp = pool[i]
                outcomes[case.id] = outcome_of(case, corrupt(resp, case, rng), schemas)
        verdict = judge(figures(outcomes.values(), truth), ref_fig, SETTINGS.toolcalls, SETTINGS.health.tool_error_baseline)
        fails += verdict.verdict == "fail"
    return fails / runs, float(len(corruptible))


async def fake_pool(cases: Sequence[Case]) -> list[tuple[Case, dict[str, Any]]]:
    client = FakeToolClient(expectations=expectations_of(cases))
    return [(case, await client.chat(case.request())) for case in cases]


async def testbed_pools(cases: Sequence[Case]) -> tuple[list[tuple[Case, dict[str, Any]]], list[tuple[Case, dict[str, Any]]]]:
    from probes.testbed.harness import EndpointSpec, Testbed
    from tests.probes.fakes import live_clients

    specs = [EndpointSpec("ref", model="smollm2"), EndpointSpec("honest-2", model="smollm2", process=1)]
    with Testbed(specs) as tb:
        urls = {name: tb.base_url(name) for name in ("ref", "honest-2")}
        async with live_clients(urls) as clients:

            async def pool(name: str) -> list[tuple[Case, dict[str, Any]]]:
                return [(case, await clients[name].chat(case.request())) for case in cases]

            ref, honest = await asyncio.gather(pool("ref"), pool("honest-2"))
    return ref, honest


def passive_rows(runs: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    h = SETTINGS.health
    cusum = BernoulliCusum(h.tool_error_baseline, h.tool_error_alarm, h.tool_cusum_h)
    rows = []
    for label, rate in [("null (0.2% baseline)", h.tool_error_baseline), *[(f"{r:.0%} bad", r) for r in RATES]]:
        lengths = run_lengths(cusum, rate, runs=runs, horizon=10_000, rng=rng)
        row: dict[str, Any] = {"probe": "passive CUSUM", "case": label, "runs": runs}
        for within in (100, 1000, 10_000):
            row[f"alarm<={within}"] = float(np.mean(lengths <= within))
        row["median responses"] = float(np.median(lengths))
        rows.append(row)
    return rows


def se(p: float, n: int) -> float:
    return float(np.sqrt(max(p * (1 - p), 1e-12) / n))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="replicates per power point")
    parser.add_argument("--null-runs", type=int, default=2000, help="replicates per null point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--testbed", action="store_true", help="draw the pool from SmolLM2 behind the testbed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cases = load_suite().cases
    rows: list[dict[str, Any]] = []
    if args.testbed:
        pool, honest = asyncio.run(testbed_pools(cases))
        schemas = SchemaCache()
        reference = {case.id: outcome_of(case, resp, schemas) for case, resp in pool}
        replica = [outcome_of(case, resp, schemas) for case, resp in honest]
        fig = figures(replica, {cid: o.triggered for cid, o in reference.items()})
        ref_fig = figures(reference.values(), {c.id: c.expect_call for c in cases})
        verdict = judge(fig, ref_fig, SETTINGS.toolcalls, SETTINGS.health.tool_error_baseline)
        rows.append({"probe": "active suite", "case": "reference self-run", "runs": 1, "judged": ref_fig.judged,
                     "calls": ref_fig.call_responses, "bad": ref_fig.bad, "schema": ref_fig.schema_accuracy,
                     "f1 vs expected": ref_fig.f1, "exact": ref_fig.exact_match,
                     "bad cases": ",".join(cid for cid, o in reference.items() if o.bad)})
        rows.append({"probe": "active suite", "case": "honest replica (another process) vs reference", "runs": 1,
                     "rate": float(verdict.verdict == "fail"), "schema": fig.schema_accuracy, "f1": fig.f1,
                     "exact": fig.exact_match})
        source = "SmolLM2-135M (testbed)"
    else:
        pool = asyncio.run(fake_pool(cases))
        schemas = SchemaCache()
        reference = {case.id: outcome_of(case, resp, schemas) for case, resp in pool}
        source = "ideal fake model"
    for label, rate, runs in [
        ("FPR, no corruption", 0.0, args.null_runs),
        ("FPR, 0.2% baseline errors", SETTINGS.health.tool_error_baseline, args.null_runs),
        *[(f"power, {r:.0%} corrupted", r, args.runs) for r in RATES],
    ]:
        share, calls = active_rate(pool, reference, rate, runs, rng)
        rows.append({"probe": "active suite", "case": label, "runs": runs, "rate": share, "se": se(share, runs),
                     "requests": len(pool), "calls": calls, "pool": source})
    rows += passive_rows(args.runs, rng)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    power5 = next(r["rate"] for r in rows if r["case"] == "power, 5% corrupted")
    fpr = next(r["rate"] for r in rows if r["case"] == "FPR, 0.2% baseline errors")
    return 0 if power5 >= 0.85 and fpr <= 0.01 + 2 * se(0.01, args.null_runs) else 1


if __name__ == "__main__":
    sys.exit(main())
