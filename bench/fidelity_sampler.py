"""Fidelity on an honest llama-server at its own sampler defaults, and with them off.

The blind drill (bench/blind_drill.py) reached llama-server as a plain OpenAI endpoint, and its
fidelity p-values were low on honest llama-server endpoints (one was DEMOTED). llama-server
samples through top-k 40 and min-p 0.05 unless a request turns them off, while its logprobs are
the untruncated distribution: this script samples the fidelity probe's first token `--samples`
times both ways and prints the probe's χ² test for each.

    nice -n 10 .venv/bin/python bench/fidelity_sampler.py      # ~20 s here
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.calibrate_reference import llama_server  # noqa: E402
from probes.stats.fidelity import fidelity_test  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402

NO_LOGPROBS = "<answer without logprobs>"


async def sample(url: str, extra: dict[str, Any], n: int, prompt: str) -> tuple[float | None, float, int]:
    counts: collections.Counter[str] = collections.Counter()
    top: dict[str, float] | None = None
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for i in range(n):
            body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
                    "temperature": 1.0, "top_p": 1, "logprobs": True, "top_logprobs": 20, "seed": 1000 + i,
                    **extra}  # fmt: skip
            data = (await client.post("/v1/chat/completions", json=body)).json()
            logprobs = data["choices"][0].get("logprobs")
            if logprobs is None:  # a token that is not whole UTF-8: llama-server leaves logprobs out
                counts[NO_LOGPROBS] += 1
                continue
            entry = logprobs["content"][0]
            counts[entry["token"]] += 1
            top = top or {t["token"]: t["logprob"] for t in entry["top_logprobs"]}
    assert top is not None
    outcome = fidelity_test(counts, top, 1.0)
    return outcome.p_value, outcome.statistic, counts[NO_LOGPROBS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--prompt", default="x")
    args = parser.parse_args()
    gguf = smollm2_path("fidelity-sampler", default_cache_dir())
    with tempfile.TemporaryDirectory() as tmp, llama_server(gguf, {}, Path(tmp), "server") as (url, _):
        for label, extra in (("llama-server defaults", {}), ("top_k 0, min_p 0", {"top_k": 0, "min_p": 0.0})):
            p, stat, missing = asyncio.run(sample(url, extra, args.samples, args.prompt))
            print(f"{label}: fidelity p = {p:.3g}, chi2 = {stat:.1f}, {args.samples} samples "
                  f"({missing} without logprobs)")  # fmt: skip


if __name__ == "__main__":
    main()
