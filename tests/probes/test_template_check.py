"""The audit-start template check's comparison, on its own."""

from __future__ import annotations

from probes.template_check import compare


def test_equal_counts_are_the_same_template() -> None:
    assert compare([31, 40], [31, 40]).status == "same"


def test_a_default_system_prompt_shows_as_a_difference() -> None:
    check = compare([55, 40], [31, 40])  # SmolLM2's own template adds 24 tokens without a system message
    assert check.status == "differs" and "[55, 40]" in check.reason and "[31, 40]" in check.reason


def test_off_by_one_bos_handling_differs_too() -> None:
    assert compare([32, 41], [31, 40]).status == "differs"


def test_without_a_pair_of_counts_it_is_unknown() -> None:
    assert compare([None, 40], [31, None]).status == "unknown"
    assert compare([None, 41], [31, 40]).status == "differs"
