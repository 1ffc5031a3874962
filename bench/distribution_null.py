"""The distribution probe's false-positive rate between honest engines of the same weights.

A failure of the distribution test against a reference of the endpoint's own weights is the
endpoint's own evidence (probes.distribution), so honest engines of the same weights must pass it
at its alpha. The probe compares the endpoint with one reference pool per tolerated sampler
(`REFERENCE_SAMPLERS`: plain, and llama.cpp's default top-k 40 / min-p 0.05 cut) and takes the
largest p: the `probe (largest p)` rows. The blind drill's honest engines draw one pool
per audit with the probe's seeds, so every seed of the drill repeats the same texts: one sample of
the null. This script draws `--pools` independent pools from each honest engine (the probe's
requests with other seeds) and tests each against frozen reference pools at the probe's default sizes:

- the reference: llama-server as the blind drill starts it (`--jinja`, 1 thread), reached two ways:
  with its default cut asked for explicitly (top-k 40 and min-p 0.05, the probe's tolerated cut) and
  with OpenAI's sampling made explicit (`top_k` 0, `min_p` 0: what the bundled engine's adapter sends);
- honest endpoints: llama-cpp-python's `Llama` through the testbed (its own logits and sampler) and
  llama-server at `-b 8 -ub 8`, each as a plain OpenAI endpoint.

    nice -n 10 .venv/bin/python bench/distribution_null.py --pools 6     # ~25 minutes here, idle

Prints every p-value and the share at or below 0.01 (the probe's alpha) and 0.001 (confirm_alpha).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.calibrate_reference import llama_server  # noqa: E402
from bench.probe_power import HttpChat  # noqa: E402
from probes.distribution import PROMPTS, REFERENCE_SAMPLERS, Pool, draw_pool  # noqa: E402
from probes.settings import DistributionSettings  # noqa: E402
from probes.stats.mmd import mmd_test  # noqa: E402
from probes.testbed.harness import EndpointSpec, Testbed  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402

MODEL = "smollm2"
OPENAI_SAMPLING: dict[str, Any] = {"top_k": 0, "min_p": 0.0}


async def pool(
    client: HttpChat, settings: DistributionSettings, first_seed: int, sampler: dict[str, Any] | None = None
) -> Pool:
    drawn, errors = await draw_pool(client, PROMPTS[: settings.prompts], settings, lambda: None,  # type: ignore[arg-type]
                                    first_seed=first_seed, sampler=sampler)
    if errors:
        raise RuntimeError(f"{errors} requests failed")
    return drawn


def test(sample: Pool, reference: Pool, settings: DistributionSettings, rng: np.random.Generator) -> float:
    outcome = mmd_test(sample["texts"], sample["prompts"], reference["texts"], reference["prompts"],
                       max_chars=settings.max_chars, permutations=20_000, rng=rng)
    assert outcome.p_value is not None
    return outcome.p_value


async def run(pools: int, seed: int) -> None:
    settings = DistributionSettings()
    rng = np.random.default_rng(seed)
    gguf = smollm2_path("distribution-null", default_cache_dir())
    with tempfile.TemporaryDirectory(prefix="distribution-null-") as tmp, contextlib.ExitStack() as stack:
        ref_url, _ = stack.enter_context(llama_server(gguf, {}, Path(tmp), "reference"))
        b8_url, _ = stack.enter_context(llama_server(
            gguf, {"extra_args": ("--batch-size", "8", "--ubatch-size", "8")}, Path(tmp), "b8"))
        tb = stack.enter_context(Testbed([EndpointSpec("honest", MODEL, 0, {})], startup_timeout=600, n_ctx=2048,
                                         threads=1))
        async with httpx.AsyncClient(timeout=600) as http:
            started = time.monotonic()
            # The probe's tolerated cut (llama-server's defaults) and its plain sampler, which the
            # bundled engine's adapter asks for (`top_k` 0, `min_p` 0).
            reference = HttpChat(http, ref_url + "/v1")
            references = {
                "llama-server defaults": await pool(reference, settings, 0, dict(REFERENCE_SAMPLERS[1])),
                "llama-server, OpenAI sampling": await pool(reference, settings, 0, OPENAI_SAMPLING),
            }
            print(f"reference pools drawn in {time.monotonic() - started:.0f} s", flush=True)
            endpoints = {"llama-cpp-python Llama": HttpChat(http, tb.base_url("honest")),
                         "llama-server -b 8 -ub 8": HttpChat(http, b8_url + "/v1")}
            p_values: dict[tuple[str, str], list[float]] = {}
            for k in range(pools):
                for name, client in endpoints.items():
                    started = time.monotonic()
                    sample = await pool(client, settings, 1000 * (k + 1))
                    ps = []
                    for ref_name, reference in references.items():
                        p = test(sample, reference, settings, rng)
                        ps.append(p)
                        p_values.setdefault((name, ref_name), []).append(p)
                        print(f"pool {k} {name} vs {ref_name}: p = {p:.3g} ({time.monotonic() - started:.0f} s)",
                              flush=True)
                    p_values.setdefault((name, "probe (largest p)"), []).append(max(ps))
    print("\n| endpoint | reference | pools | p <= 0.01 | p <= 0.001 | p-values |\n|---|---|---|---|---|---|")
    for (name, ref_name), ps in p_values.items():
        print(f"| {name} | {ref_name} | {len(ps)} | {sum(p <= 0.01 for p in ps)} | {sum(p <= 0.001 for p in ps)} "
              f"| {', '.join(f'{p:.3g}' for p in ps)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=6, help="independent pools per honest engine (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="the permutations' seed")
    args = parser.parse_args()
    asyncio.run(run(args.pools, args.seed))


if __name__ == "__main__":
    main()
