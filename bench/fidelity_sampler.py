"""Fidelity on an honest llama-server at its own sampler defaults, and with them off.

The blind drill (bench/blind_drill.py) reached llama-server as a plain OpenAI endpoint, and its
fidelity p-values were low on honest llama-server endpoints (one was DEMOTED). llama-server
samples through top-k 40 and min-p 0.05 unless a request turns them off, while its logprobs are
the untruncated distribution: this script samples the fidelity probe's first token `--samples`
times both ways and prints the probe's test for each (`probes.stats.fidelity`, judged on the
prefixes a tolerated truncation may keep, at the probe's default tolerance). The last two rows
send temperature 0.7 and judge the answers as T = 1: an endpoint that ignores the requested
temperature, the fault the probe exists for, behind llama-server's sampler and without it.

    nice -n 10 .venv/bin/python bench/fidelity_sampler.py      # ~20 s here
    nice -n 10 .venv/bin/python bench/fidelity_sampler.py --exact 8 --samples 200

`--exact N` needs no llama-server: it takes the exact first-token distributions of the probe's
first N conversations from llama-cpp-python and prints, per conversation, the rate of p <= alpha
of simulated samplers (honest untruncated, honest through llama-server's cut, T x0.7 both ways).
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
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.calibrate_reference import llama_server  # noqa: E402
from probes.base import Outcome  # noqa: E402
from probes.settings import FidelitySettings, TrafficSettings  # noqa: E402
from probes.stats.fidelity import fidelity_test, head_tokens  # noqa: E402
from probes.traffic import conversation  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402

NO_LOGPROBS = "<answer without logprobs>"


async def sample(url: str, extra: dict[str, Any], n: int, prompt: str, served: float) -> tuple[Outcome, int]:
    counts: collections.Counter[str] = collections.Counter()
    top: dict[str, float] | None = None
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for i in range(n):
            body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 1,
                    "temperature": served, "top_p": 1, "logprobs": True, "top_logprobs": 20, "seed": 1000 + i,
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
    missing = counts.pop(NO_LOGPROBS, 0)  # the probe drops these answers too
    settings = FidelitySettings()
    outcome = fidelity_test(counts, top, 1.0, min_p=settings.tolerated_min_p, top_k=settings.tolerated_top_k)
    return outcome, missing


def engine_rows(samples: int, prompt: str) -> None:
    gguf = smollm2_path("fidelity-sampler", default_cache_dir())
    with tempfile.TemporaryDirectory() as tmp, llama_server(gguf, {}, Path(tmp), "server") as (url, _):
        off = {"top_k": 0, "min_p": 0.0}
        rows = (
            ("llama-server defaults", {}, 1.0), ("top_k 0, min_p 0", off, 1.0),
            ("T 0.7 sent, judged at 1, defaults", {}, 0.7), ("T 0.7 sent, judged at 1, top_k 0, min_p 0", off, 0.7),
        )  # fmt: skip
        for label, extra, served in rows:
            outcome, missing = asyncio.run(sample(url, extra, samples, prompt, served))
            d = outcome.details
            print(f"{label}: fidelity p = {_g(outcome.p_value)} (chi2 p = {_g(d.get('chi2_p'))}, "
                  f"temperature p = {_g(d.get('temperature_p'))}, estimate {d['temperature_estimate']}), "
                  f"head {d['head']}, kept {d['kept']} of prefixes {d['prefixes']}, "
                  f"outside the head {d['outside_head']}, tail truncated: {d.get('tail_truncated')}; "
                  f"{samples} samples ({missing} without logprobs)", flush=True)  # fmt: skip


# -- rates on the model's exact first-token distributions -----------------------------------------
# The probe's conversations (probes.traffic, drawn as a probe round with rng seed i draws its own),
# each evaluated once by llama-cpp-python for the full next-token distribution; samplers are then
# simulated from it exactly (untruncated, or through llama-server's top-k 40 / min-p 0.05 before the
# temperature), the top 20 reported as the probe reads them.

LLAMA_SERVER_CUT = {"top_k": 40, "min_p": 0.05}


def exact_distributions(conversations: int) -> list[tuple[str, np.ndarray]]:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from probes.testbed.backends import LlamaOptions, load_llama
    from probes.testbed.templates import chat_template

    llm = load_llama(smollm2_path("fidelity-sampler", default_cache_dir()), LlamaOptions(n_ctx=1024))
    eos, bos = llm.token_eos(), llm.token_bos()
    formatter = Jinja2ChatFormatter(
        template=chat_template(llm.metadata), eos_token=llm._model.token_get_text(eos),
        bos_token=llm._model.token_get_text(bos) if bos != -1 else "", stop_token_ids=[eos],
    )  # fmt: skip
    out = []
    for seed in range(conversations):
        messages = conversation(np.random.default_rng(seed), TrafficSettings(), tools=False)["messages"]
        rendered = formatter(messages=messages)
        tokens = llm.tokenize(rendered.prompt.encode(), add_bos=not rendered.added_special, special=True)
        llm.reset()
        llm.eval(tokens)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=float)
        out.append((messages[-1]["content"], logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())))
    return out


def draws(
    rng: np.random.Generator, lp: np.ndarray, served: float, shape: tuple[int, int], cut: dict[str, Any]
) -> np.ndarray:
    keep = np.ones(lp.size, dtype=bool)
    if cut:
        keep &= lp >= np.sort(lp)[::-1][cut["top_k"] - 1]
        keep &= lp >= lp.max() + np.log(cut["min_p"])
    z = np.where(keep, lp / served, -np.inf)
    p = np.exp(z - z.max())
    return rng.choice(lp.size, size=shape, p=p / p.sum())


def exact_rates(conversations: int, samples: int, replicates: int, alpha: float) -> None:
    settings = FidelitySettings()
    rng = np.random.default_rng(0)
    print(f"rates of p <= {alpha} over {replicates} tests of {samples} samples, judged at T = 1:")
    print("| request | top token | head | top-20 share | FPR untruncated | FPR llama-server cut "
          "| power T x0.7 | power T x0.7 behind the cut |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for label, lp in exact_distributions(conversations):
        order = np.argsort(lp)[::-1][:20]
        top = {f"t{i}": float(lp[i]) for i in order}
        head = len(head_tokens(top, 1.0, min_p=settings.tolerated_min_p, top_k=settings.tolerated_top_k))
        rates = []
        for served, cut in ((1.0, {}), (1.0, LLAMA_SERVER_CUT), (0.7, {}), (0.7, LLAMA_SERVER_CUT)):
            rejected = 0
            for row in draws(rng, lp, served, (replicates, samples), cut):
                ids, counts = np.unique(row, return_counts=True)
                outcome = fidelity_test(
                    {f"t{i}": int(c) for i, c in zip(ids, counts, strict=True)}, top, 1.0,
                    min_p=settings.tolerated_min_p, top_k=settings.tolerated_top_k,
                )  # fmt: skip
                rejected += outcome.p_value is not None and outcome.p_value <= alpha
            rates.append(f"{rejected / replicates:.3f}")
        print(f"| {label} | {np.exp(lp.max()):.2f} | {head} | {np.exp(lp[order]).sum():.2f} | "
              + " | ".join(rates) + " |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--prompt", default="x")
    parser.add_argument("--exact", type=int, metavar="N", help="rates on N conversations' exact distributions instead")
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--alpha", type=float, default=FidelitySettings().alpha)
    args = parser.parse_args()
    if args.exact:
        exact_rates(args.exact, args.samples, args.replicates, args.alpha)
    else:
        engine_rows(args.samples, args.prompt)


def _g(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()
