"""Fan-out's sum of its parts' usages: each part sent the same prompt."""

from __future__ import annotations

from kernel.values import Usage
from providers.fanout import add_usages


def test_parts_usages_add_up() -> None:
    total = add_usages([Usage(40, 3, 30, cache_reported=True), Usage(40, 5, 0, cache_reported=True)])
    assert total == Usage(80, 8, 30) and total.prompt_reported and total.cache_reported
    assert add_usages([None, None]) is None and add_usages([]) is None


def test_a_part_that_reported_no_usage_counts_nothing_of_its_own() -> None:
    """Its prompt is a counted part's, its output is left to the estimate (it once made the whole
    None: every counted part's output was then estimated from the uncounted part's text alone)."""
    total = add_usages([Usage(40, 3), None])
    assert total is not None and total.prompt_reported and not total.completion_reported
    assert (total.prompt_tokens, total.completion_tokens) == (80, 3)


def test_a_part_that_counted_no_prompt_is_given_a_counted_parts_prompt() -> None:
    total = add_usages([Usage(40, 3), Usage(0, 5, prompt_reported=False), Usage(40, 4)])
    assert total is not None and total.prompt_reported and (total.prompt_tokens, total.completion_tokens) == (120, 12)


def test_parts_that_counted_no_prompt_leave_it_to_the_estimate() -> None:
    total = add_usages([Usage(0, 3, prompt_reported=False), Usage(0, 5, prompt_reported=False)])
    assert total is not None and not total.prompt_reported and total.completion_tokens == 8


def test_a_part_that_counted_no_output_leaves_the_whole_s_output_uncounted() -> None:
    """Its output is then the larger of the parts' counts and the gateway's estimate (the accountant)."""
    assert add_usages([Usage(40, 3), Usage(40, 5)]).completion_reported  # type: ignore[union-attr]
    total = add_usages([Usage(40, 3), Usage(40, 0, completion_reported=False)])
    assert total is not None and not total.completion_reported and total.completion_tokens == 3
