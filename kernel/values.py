"""Value types every layer shares: the operation a request asks for and the tokens it used."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Operation = Literal["chat", "completions", "embeddings"]
# The API a client spoke: an operation's own, or one translated into an operation (both into chat).
ClientApi = Literal["chat", "completions", "embeddings", "responses", "messages"]


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # Whether the upstream reported cached tokens at all (0 reported is a miss; absent says nothing).
    cache_reported: bool = field(default=False, compare=False)
    # Whether the upstream counted the prompt (a positive count: no prompt is 0 tokens): a usage
    # with output only must not bill it as free (the accountant estimates it, `gateway.pipeline.account`).
    prompt_reported: bool = field(default=True, compare=False)
    # Whether the upstream counted the output at all (0 counted is an empty answer; absent says
    # nothing): where it did not, the accountant bills what reached the client (`gateway.pipeline.account`).
    completion_reported: bool = field(default=True, compare=False)

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any] | None) -> Usage | None:
        """The upstream's claim, validated: a count that is not a non-negative number counts 0, one
        past `MAX_USAGE_TOKENS` counts that much (it feeds rate limits, costs and the shared store).
        None where neither the prompt nor the output is counted (`{"total_tokens": 30}` alone is an
        embedding's prompt only without completion_tokens); `prompt_reported` false where only
        the output is, `completion_reported` false where the output has no count at all."""
        if not usage or not isinstance(usage, Mapping):
            return None
        prompt, completion, total = usage.get("prompt_tokens"), usage.get("completion_tokens"), usage.get("total_tokens")
        if token_count(prompt) == 0 and token_count(total) > 0 and not is_count(completion):
            prompt = total  # embeddings upstreams that count only a total: all of it is the input
        if token_count(prompt) == 0 and token_count(completion) == 0:
            return None  # counts nothing (or only zeros): estimated whole, never free
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        for name in CACHED_TOKEN_FIELDS:
            if cached is None:
                cached = usage.get(name)
        return cls(
            prompt_tokens=token_count(prompt),
            completion_tokens=token_count(completion),
            cached_tokens=token_count(cached),
            cache_reported=cached is not None,
            prompt_reported=token_count(prompt) > 0,
            completion_reported=is_count(completion),
        )


# No request uses a billion tokens; an upstream claiming more is clamped here (a store's integer
# counters, and costs, stay sane).
MAX_USAGE_TOKENS = 1_000_000_000


def is_count(value: Any) -> bool:
    """Whether an upstream's field holds a count at all (0 included): a number, not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value < math.inf


def token_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return 0
    return MAX_USAGE_TOKENS if value >= MAX_USAGE_TOKENS else int(value)


# Where OpenAI-compatible upstreams other than OpenAI put the cached prompt tokens:
# DeepSeek's `prompt_cache_hit_tokens`, Anthropic-style `cache_read_input_tokens`.
CACHED_TOKEN_FIELDS = ("prompt_cache_hit_tokens", "cache_read_input_tokens")
