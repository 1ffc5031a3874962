"""What identifies a probe request's prompt, and the count its answer reports."""

from __future__ import annotations

from typing import Any

import pytest

from probes.prompt_identity import fingerprint, reported_prompt_tokens

MESSAGES = [{"role": "user", "content": "x"}]


def test_sampling_parameters_do_not_change_a_prompts_identity() -> None:
    base = {"model": "m", "messages": MESSAGES}
    same = fingerprint(base)
    for extra in ({"max_tokens": 7}, {"seed": 3}, {"temperature": 0.2, "top_p": 1}, {"logprobs": True, "top_logprobs": 5},
                  {"prompt_cache_key": "k"}):
        assert fingerprint({**base, **extra}) == same, extra


@pytest.mark.parametrize("change", [
    {"messages": [{"role": "user", "content": "y"}]},
    {"messages": [{"role": "system", "content": "be brief"}, *MESSAGES]},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
    {"response_format": {"type": "json_object"}},
    {"model": "other"},
    {"chat_template_kwargs": {"enable_thinking": False}},
    {"reasoning_effort": "low"},
    {"parallel_tool_calls": False},
    {"functions": [{"name": "f", "parameters": {}}], "function_call": "auto"},
])
def test_what_the_endpoint_tokenizes_changes_it(change: dict[str, Any]) -> None:
    assert fingerprint({"model": "m", "messages": MESSAGES, **change}) != fingerprint({"model": "m", "messages": MESSAGES})


@pytest.mark.parametrize(("answer", "expected"), [
    ({"usage": {"prompt_tokens": 12}}, 12),
    ({"usage": {"prompt_tokens": 0}}, None),
    ({"usage": {"prompt_tokens": -3}}, None),
    ({"usage": {"prompt_tokens": True}}, None),
    ({"usage": {"prompt_tokens": "12"}}, None),
    ({"usage": {"prompt_tokens": 12.0}}, None),
    ({"usage": None}, None),
    ({"usage": [1]}, None),
    ({}, None),
])
def test_only_a_positive_integer_count_is_read(answer: dict[str, Any], expected: int | None) -> None:
    assert reported_prompt_tokens(answer) == expected
