"""Cached prompt tokens, whatever the upstream calls them: what the affinity index learns from."""

from __future__ import annotations

import pytest

from kernel.values import Usage


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}},  # OpenAI, vLLM
        {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36},  # DeepSeek
        {"prompt_tokens": 100, "completion_tokens": 5, "cache_read_input_tokens": 64, "cache_creation_input_tokens": 0},  # Anthropic-style
    ],
)
def test_each_field_name(usage: dict) -> None:
    parsed = Usage.from_openai(usage)
    assert parsed is not None and parsed.cached_tokens == 64 and parsed.cache_reported


def test_a_reported_zero_is_a_miss_and_an_absent_field_says_nothing() -> None:
    miss = Usage.from_openai({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}})
    silent = Usage.from_openai({"prompt_tokens": 100, "completion_tokens": 1})
    assert miss is not None and miss.cache_reported and miss.cached_tokens == 0
    assert silent is not None and not silent.cache_reported and silent.cached_tokens == 0
    # Equality ignores the flag (accounting compares usages by their counts).
    assert Usage(100, 0, 0, cache_reported=True) == Usage(100, 0, 0)
