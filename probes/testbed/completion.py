"""A non-streaming completion on a `llama_cpp.Llama`, with logprobs computed only where needed.

It mirrors llama-cpp-python's `create_completion` for a token prompt (same sampler chain, seed
handling, stop strings, end-of-generation and length rules, text decoding), but reads the
logprobs of the generated positions itself: llama-cpp-python computes them for every row of
the context and sorts the whole vocabulary in Python per token, which costs ~150 ms a token.
Values match its own: `Llama.logits_to_logprobs` of the same `Llama.scores` rows (raw logits,
plus whatever a logits processor wrote there), and the same top-k order (logprob, then token
id, both descending), token strings and dict merging.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The UTF-8 lead-byte patterns llama-cpp-python checks to hold back a split character.
_MULTIBYTE_LEADS = ((2, 192), (3, 224), (4, 240))


@dataclass(frozen=True)
class TokenLogprobs:
    text: str
    logprob: float
    top: dict[str, float]  # the k best, plus the sampled token


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop" | "length"
    tokens: list[int]  # generated token ids (an end-of-generation token is not one)
    logprobs: list[TokenLogprobs] | None


def complete(
    llm: Any,
    prompt: Sequence[int],
    *,
    max_tokens: int | None,
    temperature: float,
    top_p: float,
    seed: int | None,
    stop: Sequence[str] = (),
    logprobs: int | None = None,
    logits_processor: list[Callable[..., Any]] | None = None,
    grammar: Any = None,
) -> Completion:
    """Generate from `prompt` with the full distribution (no top-k, min-p or penalties)."""
    import llama_cpp

    prompt = list(prompt)
    n_ctx = llm.n_ctx()
    if len(prompt) >= n_ctx:
        raise ValueError(f"Requested tokens ({len(prompt)}) exceed context window of {n_ctx}")
    if max_tokens is None or max_tokens <= 0:
        max_tokens = n_ctx - len(prompt)
    max_tokens = min(max_tokens, n_ctx - len(prompt))
    stops = [s.encode("utf-8") for s in stop]
    llm.set_seed(seed if seed is not None else random.Random(llm._seed).randint(0, 2**32))

    generated: list[int] = []
    text, finish_reason, multibyte_fix = b"", "length", 0
    for token in llm.generate(
        prompt,
        top_k=0,
        top_p=top_p,
        min_p=0.0,
        typical_p=1.0,
        temp=temperature,
        repeat_penalty=1.0,
        logits_processor=logits_processor,
        grammar=grammar,
    ):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            text, finish_reason = llm.detokenize(generated, prev_tokens=prompt), "stop"
            break
        generated.append(token)
        all_text = llm.detokenize(generated, prev_tokens=prompt)
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in _MULTIBYTE_LEADS:
                if num > k and pattern & char == pattern:
                    multibyte_fix = num - k
        if multibyte_fix > 0:  # the last character is not complete yet
            multibyte_fix -= 1
            continue
        hits = [s for s in stops if s in all_text]
        if hits:
            text, finish_reason = all_text[: all_text.index(hits[0])], "stop"
            break
        if len(generated) >= max_tokens:
            text, finish_reason = llm.detokenize(generated, prev_tokens=prompt), "length"
            break
    entries = None if logprobs is None else _logprobs(llm, len(prompt) - 1, generated, logprobs)
    return Completion(text.decode("utf-8", errors="ignore"), finish_reason, generated, entries)


def _logprobs(llm: Any, first_row: int, generated: list[int], k: int) -> list[TokenLogprobs]:
    """Entries of the generated tokens; token i was sampled from row `first_row + i`."""
    from llama_cpp import Llama

    bos, entries = llm.token_bos(), []
    rows = llm.scores[first_row : min(first_row + len(generated), llm.n_tokens)]
    for i, (token, logits) in enumerate(zip(generated, rows)):
        if token == bos:
            continue
        row = Llama.logits_to_logprobs(logits)
        token_text = _piece(llm, token, generated[:i])
        top = {_piece(llm, t, generated[:i]): float(row[t]) for t in top_indices(row, k)}
        top[token_text] = float(row[token])
        entries.append(TokenLogprobs(token_text, float(row[token]), top))
    return entries


def top_indices(row: np.ndarray, k: int) -> list[int]:
    """The k largest entries of `row`, ordered by (value, index) descending (ties: higher id)."""
    if k <= 0:
        return []
    if k >= row.shape[0]:
        candidates = np.arange(row.shape[0])
    else:
        kth = np.partition(row, row.shape[0] - k)[row.shape[0] - k]
        candidates = np.flatnonzero(row >= kth)
    return sorted(candidates.tolist(), key=lambda i: (row[i], i), reverse=True)[:k]


def _piece(llm: Any, token: int, previous: list[int]) -> str:
    return str(llm.detokenize([token], prev_tokens=previous).decode("utf-8", errors="ignore"))
