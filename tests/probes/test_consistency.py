"""The round's usage-consistency check: the result it gives the policy."""

from __future__ import annotations

from probes.consistency import UsageConsistency
from probes.settings import ProbeSettings


def test_the_result_is_an_own_grounds_confirmatory_test_at_the_rounds_alpha() -> None:
    settings = ProbeSettings()
    mixed = [("a", 30)] * 30 + [("a", 19)] * 10
    first = UsageConsistency().judge(mixed, settings, confirm=False)
    assert first is not None
    assert (first.probe, first.verdict, first.effect, first.grounds) == ("consistency", "fail", "confirm", "self")
    assert first.details is not None and first.details["alpha"] == settings.consistency.alpha
    again = UsageConsistency().judge(mixed, settings, confirm=True)
    assert again is not None and again.details is not None and again.details["alpha"] == settings.health.confirm_alpha
    # The fleet's e-value stakes only a share on this check (its p-value is 1 on honest endpoints).
    assert first.details["fleet_weight"] == settings.consistency.fleet_weight < 1


def test_no_repeated_prompt_gives_no_result() -> None:
    assert UsageConsistency().judge([("a", 30), ("b", 31)], ProbeSettings(), confirm=False) is None


def test_repeated_prompts_without_any_count_are_inconclusive_and_say_why() -> None:
    result = UsageConsistency().judge([("a", None), ("a", None)], ProbeSettings(), confirm=False)
    assert result is not None and result.verdict == "inconclusive"
    assert result.details is not None and "no answer reported prompt_tokens" in result.details["reason"]
