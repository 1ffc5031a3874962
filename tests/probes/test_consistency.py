"""The round's usage-consistency check: what identifies a prompt, what a reported count is, and
the result it gives the policy."""

from __future__ import annotations

from typing import Any

import pytest

from probes.consistency import UsageConsistency, fingerprint, reported_prompt_tokens
from probes.settings import ProbeSettings

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


def test_the_result_is_an_own_grounds_confirmatory_test_at_the_rounds_alpha() -> None:
    settings = ProbeSettings()
    mixed = [("a", 30)] * 30 + [("a", 19)] * 10
    first = UsageConsistency().judge(mixed, settings, confirm=False)
    assert first is not None
    assert (first.probe, first.verdict, first.effect, first.grounds) == ("consistency", "fail", "confirm", "self")
    assert first.details is not None and first.details["alpha"] == settings.consistency.alpha
    again = UsageConsistency().judge(mixed, settings, confirm=True)
    assert again is not None and again.details is not None and again.details["alpha"] == settings.health.confirm_alpha


def test_no_repeated_prompt_gives_no_result() -> None:
    assert UsageConsistency().judge([("a", 30), ("b", 31)], ProbeSettings(), confirm=False) is None


def test_repeated_prompts_without_any_count_are_inconclusive_and_say_why() -> None:
    result = UsageConsistency().judge([("a", None), ("a", None)], ProbeSettings(), confirm=False)
    assert result is not None and result.verdict == "inconclusive"
    assert result.details is not None and "no answer reported prompt_tokens" in result.details["reason"]
