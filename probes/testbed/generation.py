"""One request on a loaded llama.cpp model, under one request's fault draws -> OpenAI JSON.

The honest path is `completion.complete`: llama-cpp-python's own sampler (grammar, seed) driven
as its `create_completion` drives it, with logprobs computed only for the generated positions.
Reported logprobs are read from `Llama.scores`, the raw logits of each position, while a
`logits_processor` only changes the sampler's copy; so `logit_noise` adds the same noise to
both (reported logprobs reflect it); the KV cache of a shared prompt prefix is reused, but the
last prompt token is always evaluated again, so noisy rows never serve a later request. A served
temperature only reaches the sampler: logprobs stay raw, as vLLM reports them. The sampler keeps
the full distribution (no top-k, min-p or penalties), so sampled tokens follow the returned
logprobs exactly at the requested temperature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from probes.testbed.backends import LoadedModel
from probes.testbed.completion import TokenLogprobs, complete
from probes.testbed.faults import (
    Draws,
    logit_noise,
    loop_tokens,
    reported_prompt_tokens,
    served_temperature,
    truncate_tokens,
)
from probes.testbed.wire import BadRequest, Sampling


@dataclass(frozen=True)
class TokenEntry:
    text: str
    logprob: float
    top: dict[str, float]


@dataclass
class Generated:
    text: str
    finish_reason: str
    prompt_tokens: int  # as reported
    completion_tokens: int
    entries: list[TokenEntry] | None
    touched: set[str] = field(default_factory=set)


def generate(
    model: LoadedModel, prompt: list[int], sampling: Sampling, draws: Draws, grammar: str | None = None
) -> Generated:
    """Run one completion on `model` (the caller holds no lock; this takes it)."""
    spec, touched = draws.spec, set()
    tokens = prompt
    if spec.truncate_prompt is not None:
        tokens = truncate_tokens(prompt, spec.truncate_prompt)
        if len(tokens) < len(prompt):
            touched.add("truncate_prompt")
    temperature = served_temperature(sampling.temperature, spec)
    if spec.temperature is not None or spec.temperature_scale is not None:
        touched.add("temperature" if spec.temperature is not None else "temperature_scale")
    llm = model.llm
    n_ctx = llm.n_ctx()
    if len(tokens) >= n_ctx:
        raise BadRequest(f"the prompt has {len(tokens)} tokens; this model's context is {n_ctx}", "messages")
    limit = min(sampling.max_tokens or n_ctx, n_ctx - len(tokens))
    max_tokens = min(limit, spec.loop.after_tokens) if draws.loop and spec.loop else limit
    want_logprobs = sampling.top_logprobs is not None or draws.loop
    processors = _processors(llm, sampling, spec.logit_noise, draws.noise_seed)
    if spec.logit_noise > 0:
        touched.add("logit_noise")
    with model.lock:
        # Keep the KV cache of the longest shared prefix (llama.cpp then evaluates only the rest),
        # but always re-evaluate at least the last prompt token, so the logits row sampled and
        # reported is fresh: a noisy row from an earlier request never serves this one. The logits
        # are not bit-identical to a full evaluation: the same prompt's first-token logprobs
        # differ by up to 0.24 nats with the cached prefix's length (`bench/fidelity_reports.py`),
        # as a provider's prefix cache or batching does; reported and sampled alike, so honest.
        llm.n_tokens = min(llm.n_tokens, max(0, len(tokens) - 1))
        try:
            out = complete(
                llm,
                tokens,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=sampling.top_p,
                seed=sampling.seed,
                stop=list(sampling.stop),
                logprobs=(sampling.top_logprobs or 0) if want_logprobs else None,
                logits_processor=processors or None,
                grammar=_grammar(grammar),
            )
        except BaseException:
            llm.reset()
            raise
    entries = _entries(out.logprobs) if want_logprobs else None
    result = Generated(
        text=out.text,
        finish_reason=out.finish_reason,
        prompt_tokens=reported_prompt_tokens(len(prompt), len(tokens), spec.truncate_prompt),
        completion_tokens=len(out.tokens),
        entries=entries,
        touched=touched,
    )
    if draws.loop and spec.loop and entries:
        looped = loop_tokens(entries, spec.loop.after_tokens, limit, spec.loop.ngram)
        result.entries, result.text = looped, "".join(e.text for e in looped)
        result.finish_reason, result.completion_tokens = "length", len(looped)
        touched.add("loop")
    if sampling.top_logprobs is None:
        result.entries = None
    return result


def _processors(llm: Any, sampling: Sampling, sigma: float, noise_seed: int) -> list[Callable[..., Any]]:
    processors = []
    if sampling.logit_bias:
        bias = {int(k): float(v) for k, v in sampling.logit_bias.items()}

        def add_bias(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
            scores = scores.copy()
            for token, value in bias.items():
                if 0 <= token < scores.shape[0]:
                    scores[token] += value
            return scores

        processors.append(add_bias)
    if sigma > 0:
        rng = np.random.default_rng(noise_seed)

        def add_noise(input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
            noise = logit_noise(scores.shape[0], sigma, rng)
            # The row the reported logprobs of this position are computed from.
            llm.scores[llm.n_tokens - 1, : noise.shape[0]] += noise
            noisy: np.ndarray = scores + noise
            return noisy

        processors.append(add_noise)
    return processors


def _grammar(text: str | None) -> Any:
    if text is None:
        return None
    from llama_cpp.llama_grammar import LlamaGrammar

    return LlamaGrammar.from_string(text, verbose=False)


def _entries(logprobs: list[TokenLogprobs] | None) -> list[TokenEntry]:
    return [TokenEntry(e.text, e.logprob, e.top) for e in logprobs or []]


def chat_logprobs(entries: Sequence[TokenEntry], k: int) -> dict[str, Any]:
    return {
        "content": [
            {
                "token": e.text,
                "logprob": e.logprob,
                "bytes": list(e.text.encode()),
                "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in _top(e, k)],
            }
            for e in entries
        ]
    }


def completion_logprobs(entries: Sequence[TokenEntry], k: int) -> dict[str, Any]:
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e.text)
    return {
        "tokens": [e.text for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [dict(_top(e, k)) for e in entries],
        "text_offset": offsets,
    }


def _top(entry: TokenEntry, k: int) -> list[tuple[str, float]]:
    # llama-cpp-python adds the sampled token to its top-k dict; report exactly k, best first.
    return sorted(entry.top.items(), key=lambda kv: -kv[1])[:k]
