"""Does llama-server's answer to a prompt depend on what it served before? Two servers of the same
GGUF (the reference as the drill starts it, and one at `-b 8 -ub 8`) answer the drift probe's four
prompts at T=0 (one token, top 20 logprobs); then the reference alone serves long prompts (as a
sentinels or tool-call audit of another endpoint makes it do), then short ones, and both answer
again. Prints, per phase and prompt, the largest |logprob| difference between two answers of the
reference in a row and between the reference and the other server (tokens both list).

    nice -n 5 .venv/bin/python bench/reference_cache_state.py            # about 2 minutes here
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.calibrate_reference import llama_server  # noqa: E402
from probes.settings import DriftSettings  # noqa: E402
from providers.engines.models import default_cache_dir, smollm2_path  # noqa: E402

PROMPTS = DriftSettings().prompts
# What the gateway's `llamacpp` adapter sends the bundled engine (OpenAI's sampling, no cut).
REFERENCE_SAMPLING = {"top_k": 0, "min_p": 0.0, "top_p": 1.0}


def top(url: str, prompt: str, extra: Mapping[str, Any]) -> dict[str, float]:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 1, "temperature": 0,
            "logprobs": True, "top_logprobs": 20, **extra}
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    return {t["token"]: t["logprob"] for t in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}


def gap(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    return max(abs(a[t] - b[t]) for t in set(a) & set(b))


def send(url: str, content: str, seed: int) -> None:
    httpx.post(url + "/v1/chat/completions", timeout=300, json={
        "model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 32, "temperature": 0.8,
        "seed": seed})


def main() -> None:
    gguf = smollm2_path("reference-cache-state", default_cache_dir())
    b8 = {"extra_args": ("--batch-size", "8", "--ubatch-size", "8")}
    with tempfile.TemporaryDirectory() as tmp, llama_server(gguf, {}, Path(tmp), "ref") as (ref, _), \
            llama_server(gguf, b8, Path(tmp), "b8") as (other, _):

        def phase(name: str, extra: Mapping[str, Any] = REFERENCE_SAMPLING) -> None:
            for p in PROMPTS:
                first, again, theirs = top(ref, p, extra), top(ref, p, extra), top(other, p, {})
                print(f"| {name} | {p!r} | {gap(first, again):.4f} | {gap(first, theirs):.4f} |", flush=True)

        print("| reference state | prompt | reference twice | reference vs -b 8 |\n|---|---|---|---|")
        phase("fresh")
        long = "The quick brown fox jumps over the lazy dog. " * 150  # about 1,500 tokens
        for i in range(6):
            send(ref, long + str(i), i)
        phase("after 6 long prompts")
        phase("the same, cache_prompt false", {**REFERENCE_SAMPLING, "cache_prompt": False})
        for i in range(6):
            send(ref, f"Name a colour. {i}", i)
        phase("after 6 short prompts")


if __name__ == "__main__":
    main()
